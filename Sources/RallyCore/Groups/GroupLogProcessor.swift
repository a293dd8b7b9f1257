import Crypto
import Foundation
import RallyCrypto
import RallyWire

/// What one entry of a group log did.
public enum GroupLogEvent: Sendable {
    case commit(seq: UInt64, commitID: Data, author: InboxID, outcome: GroupOutcome)
    case message(StoredMessage)
    case rejected(seq: UInt64, reason: GroupEntryRejection)
}

public enum GroupEntryRejection: Error, Sendable, Equatable, CustomStringConvertible {
    case malformed(String)
    case badSignature(String)
    case noKeyForEpoch(UInt64)
    case futureEpoch(UInt64)
    case senderNotAMember(InboxID)
    case senderMayNotSend(InboxID, GroupRole)
    case undecryptable(String)

    public var description: String {
        switch self {
        case .malformed(let what): "malformed group log entry: \(what)"
        case .badSignature(let what): "bad signature: \(what)"
        case .noKeyForEpoch(let epoch): "no key for epoch \(epoch) (sent after this member lost access)"
        case .futureEpoch(let epoch): "message claims epoch \(epoch), which the group has not reached"
        case .senderNotAMember(let inbox): "\(inbox) is not a member at this point of the log"
        case .senderMayNotSend(let inbox, let role): "\(inbox) is \(role) and may not send"
        case .undecryptable(let reason): "cannot decrypt: \(reason)"
        }
    }
}

/// Applies one group log entry to a group record: pure apart from the
/// epoch-key lookup it is given. The caller persists the result atomically.
struct GroupLogProcessor {
    let identity: Identity
    let codecs: CodecRegistry

    struct Result {
        var record: GroupRecord
        var newKey: (UInt64, SymmetricKey)?
        /// This admin's copy of the group's invite seed, when a commit set
        /// invites up.
        var inviteSeed: SymmetricKey?
        var event: GroupLogEvent
    }

    func process(
        _ envelope: WireEnvelope, record: GroupRecord, key: (UInt64) -> SymmetricKey?, receivedAt: Date
    ) -> Result {
        let entry: WireGroupLogEntry
        do {
            entry = try FrameCodec.decode(
                WireGroupLogEntry.self, from: envelope.payload, limit: WireLimits.maxPayloadBytes)
        } catch {
            return Result(record: record, event: .rejected(seq: envelope.seq, reason: .malformed(error.description)))
        }
        switch entry.entry {
        case .commit(let signed)?:
            return processCommit(signed, seq: envelope.seq, record: record, key: key)
        case .message(let ciphertext)?:
            return processMessage(ciphertext, envelope: envelope, record: record, key: key, receivedAt: receivedAt)
        case .sealedCommit?:
            // Compile fix on the relay branch only: the base commit's wire
            // added sealed commits; the group protocol branch handles them.
            return Result(record: record, event: .rejected(seq: envelope.seq, reason: .malformed("sealed commit")))
        case nil:
            return Result(record: record, event: .rejected(seq: envelope.seq, reason: .malformed("empty entry")))
        }
    }

    private func processCommit(
        _ signed: WireSignedGroupCommit, seq: UInt64, record: GroupRecord, key: (UInt64) -> SymmetricKey?
    ) -> Result {
        let verified: VerifiedGroupCommit
        do {
            verified = try VerifiedGroupCommit.verify(signed)
        } catch {
            return Result(record: record, event: .rejected(seq: seq, reason: .badSignature(error.description)))
        }
        var record = record
        let previousEpoch = record.state.epoch
        let outcome = record.state.apply(verified)
        var newKey: (UInt64, SymmetricKey)?
        var inviteSeed: SymmetricKey?
        if case .applied(let effects) = outcome {
            for effect in effects {
                switch effect {
                case .created where verified.author.inboxID == identity.inboxID:
                    record.status = .active
                case .memberRemoved(let inbox) where inbox == identity.inboxID:
                    record.status = .removed
                case .memberLeft(let inbox) where inbox == identity.inboxID:
                    record.status = .left
                case .epochAdvanced(let epoch, let commitID, let fresh):
                    guard record.status == .active || record.status == .creating else { break }
                    if let fresh {
                        newKey =
                            (try? EpochKeys.open(
                                fresh.sealed, as: identity, groupID: record.groupID, epoch: epoch,
                                commitment: fresh.commitment)).map { (epoch, $0) }
                    } else if let previous = key(previousEpoch) {
                        newKey = (epoch, EpochKeys.derive(from: previous, epoch: epoch, commitID: commitID))
                    }
                case .invitesSetUp(let sealedSeeds):
                    inviteSeed = openInviteSeed(sealedSeeds, state: record.state)
                case .inviteSeedShared(let sealed):
                    inviteSeed = openInviteSeed([sealed], state: record.state)
                default:
                    break
                }
            }
        }
        return Result(
            record: record, newKey: newKey, inviteSeed: inviteSeed,
            event: .commit(
                seq: seq, commitID: verified.commit.commitID, author: verified.author.inboxID, outcome: outcome))
    }

    /// Opens this member's sealed invite seed and keeps it only if it
    /// really is the seed of the invite identity the group now names.
    private func openInviteSeed(_ sealed: [WireSealedEpochKey], state: GroupState) -> SymmetricKey? {
        guard sealed.contains(where: { $0.inboxID == identity.inboxID.rawValue }),
            let seed = try? EpochKeys.openEntry(
                sealed, as: identity, groupID: state.groupID, epoch: state.epoch, info: EpochKeys.inviteSeedInfo),
            let keys = try? InviteKeys(seed: seed), let named = state.inviteIdentity,
            keys.identity.publicIdentity.hasSameKeys(as: named)
        else { return nil }
        return seed
    }

    private func processMessage(
        _ ciphertext: WireGroupCiphertext, envelope: WireEnvelope, record: GroupRecord,
        key: (UInt64) -> SymmetricKey?, receivedAt: Date
    ) -> Result {
        let seq = envelope.seq
        func reject(_ reason: GroupEntryRejection) -> Result {
            Result(record: record, event: .rejected(seq: seq, reason: reason))
        }
        guard ciphertext.epoch <= record.state.epoch else { return reject(.futureEpoch(ciphertext.epoch)) }
        guard let epochKey = key(ciphertext.epoch) else { return reject(.noKeyForEpoch(ciphertext.epoch)) }
        let verified: VerifiedMessage
        do {
            verified = try EpochKeys.decrypt(ciphertext, key: epochKey, groupID: record.groupID)
        } catch {
            return reject(.undecryptable(error.description))
        }
        // Membership is judged at this message's position in the log, the
        // same for every member.
        guard let member = record.state.members[verified.sender.inboxID],
            member.identity.hasSameKeys(as: verified.sender)
        else {
            return reject(.senderNotAMember(verified.sender.inboxID))
        }
        guard member.role.canSend else { return reject(.senderMayNotSend(member.inboxID, member.role)) }
        let content = verified.body.content
        let decoded = codecs.decode(content)
        let message = StoredMessage(
            id: verified.messageID.hexString, conversation: record.groupID,
            outgoing: verified.sender.inboxID == identity.inboxID, sender: verified.sender.inboxID,
            senderName: verified.sender.displayName,
            sentAt: Date(timeIntervalSince1970: Double(verified.body.sentAtMs) / 1000), receivedAt: receivedAt,
            topic: envelope.topic, seq: seq, contentType: decoded.contentType.description,
            encodedContent: FrameCodec.encode(content), displayText: decoded.displayText, isKnownType: decoded.isKnown)
        return Result(record: record, event: .message(message))
    }
}
