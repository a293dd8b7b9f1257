import Crypto
public import Foundation
public import RallyCrypto
import RallyWire

/// What one entry of a group log did.
public enum GroupLogEvent: Sendable {
    case commit(seq: UInt64, commitID: Data, author: InboxID, outcome: GroupOutcome)
    case message(StoredMessage)
    case rejected(seq: UInt64, reason: GroupEntryRejection)
    /// The log showed this device an entry it can authenticate that does
    /// not fit the history it has: a commit was withheld from it, or it
    /// was shown another history. The group stops sending.
    case diverged(seq: UInt64, reason: String)
    /// The relay answered that the group's topic was deleted: the owner
    /// deleted the group while this device was away (its delete commit is
    /// gone with the topic). The group is dropped here too.
    case deletedOnRelay
}

public enum GroupEntryRejection: Error, Sendable, Equatable, CustomStringConvertible {
    case malformed(String)
    case badSignature(String)
    case noKeyForEpoch(UInt64)
    case futureEpoch(UInt64)
    case senderNotAMember(InboxID)
    case senderMayNotSend(InboxID, GroupRole)
    case undecryptable(String)
    case unsealedCommit
    /// The group's preferences do not allow this content (for this role)
    /// at this point of the log.
    case notAllowedByPreference(GroupPreferences.Key, InboxID)

    public var description: String {
        switch self {
        case .malformed(let what): "malformed group log entry: \(what)"
        case .badSignature(let what): "bad signature: \(what)"
        case .noKeyForEpoch(let epoch): "no key for epoch \(epoch) (sent after this member lost access)"
        case .futureEpoch(let epoch): "message claims epoch \(epoch), which the group has not reached"
        case .senderNotAMember(let inbox): "\(inbox) is not a member at this point of the log"
        case .senderMayNotSend(let inbox, let role): "\(inbox) is \(role) and may not send"
        case .undecryptable(let reason): "cannot decrypt: \(reason)"
        case .unsealedCommit: "a commit in the clear (commits travel sealed)"
        case .notAllowedByPreference(let key, let inbox):
            "the group's preferences do not allow \(key.rawValue) from \(inbox) here"
        }
    }
}

/// Applies one group log entry to a group record: pure apart from the
/// epoch-key lookup it is given. The caller persists the result atomically.
/// A lookup that fails throws: the entry is not skipped, the caller stops
/// and reads it again later.
struct GroupLogProcessor {
    typealias KeyLookup = (UInt64) throws -> SymmetricKey?

    let identity: Identity
    let codecs: CodecRegistry

    struct Result {
        var record: GroupRecord
        var newKey: (UInt64, SymmetricKey)?
        /// This admin's copy of the group's invite seed, when a commit set
        /// invites up.
        var inviteSeed: SymmetricKey?
        var event: GroupLogEvent
        /// When a timed message disappears (every client deletes it then).
        var messageExpiresAt: Date? = nil
        /// A message deleting an earlier one, judged at its position.
        var deletion: MessageDeletionOrder? = nil
    }

    /// What a deletion message asks the store to do: remove (full deletion
    /// on) or mark an earlier message of the group, if `sender` wrote it or
    /// `moderates`.
    struct MessageDeletionOrder: Equatable {
        let messageID: String
        let sender: InboxID
        let moderates: Bool
        let full: Bool
    }

    func process(
        _ envelope: WireEnvelope, record: GroupRecord, key: KeyLookup, receivedAt: Date
    ) throws -> Result {
        var record = record
        // Every member tracks the same last control seq as the relay,
        // whatever the entry turns out to be.
        if envelope.control { record.lastControlSeq = max(record.lastControlSeq, envelope.seq) }
        let entry: WireGroupLogEntry
        do {
            entry = try FrameCodec.decode(
                WireGroupLogEntry.self, from: envelope.payload, limit: WireLimits.maxPayloadBytes)
        } catch {
            return Result(record: record, event: .rejected(seq: envelope.seq, reason: .malformed(error.description)))
        }
        switch entry.entry {
        case .sealedCommit(let sealed)?:
            if let diverged = try divergence(
                epoch: sealed.epoch, transcript: sealed.transcript, link: sealed.epochLink, seq: envelope.seq,
                record: &record, key: key)
            {
                return diverged
            }
            guard sealed.epoch <= record.state.epoch, let epochKey = try key(sealed.epoch) else {
                return Result(record: record, event: .rejected(seq: envelope.seq, reason: .noKeyForEpoch(sealed.epoch)))
            }
            let signed: WireSignedGroupCommit
            do {
                signed = try CommitSealing.open(
                    sealed, commitKey: CommitSealing.commitKey(epochKey: epochKey), groupID: record.groupID)
            } catch {
                return Result(
                    record: record, event: .rejected(seq: envelope.seq, reason: .undecryptable(error.description)))
            }
            return try processCommit(signed, sealedEpoch: sealed.epoch, seq: envelope.seq, record: record, key: key)
        case .message(let ciphertext)?:
            if let diverged = try divergence(
                epoch: ciphertext.epoch, transcript: ciphertext.transcript, link: ciphertext.epochLink,
                seq: envelope.seq, record: &record, key: key)
            {
                return diverged
            }
            return try processMessage(ciphertext, envelope: envelope, record: record, key: key, receivedAt: receivedAt)
        case .commit?:
            return Result(record: record, event: .rejected(seq: envelope.seq, reason: .unsealedCommit))
        case nil:
            return Result(record: record, event: .rejected(seq: envelope.seq, reason: .malformed("empty entry")))
        }
    }

    /// Whether an entry proves that this device's history differs from the
    /// group's: an entry of the current epoch with another transcript, or
    /// of the next epoch, authenticated by the epoch link only holders of
    /// the previous key can make. Anything that does not authenticate
    /// proves nothing and is judged as usual.
    private func divergence(
        epoch: UInt64, transcript: Data, link: Data, seq: UInt64, record: inout GroupRecord, key: KeyLookup
    ) throws -> Result? {
        let current = record.state.epoch
        let reason: String
        if epoch == current, current > 0, transcript != record.state.transcript,
            let previous = try key(current - 1),
            CommitSealing.isValidEpochLink(
                link, previousEpochKey: previous, groupID: record.groupID, epoch: epoch, transcript: transcript)
        {
            reason = "entry #\(seq) belongs to another history of epoch \(epoch) than the one this device was shown"
        } else if epoch == current + 1, let previous = try key(current),
            CommitSealing.isValidEpochLink(
                link, previousEpochKey: previous, groupID: record.groupID, epoch: epoch, transcript: transcript)
        {
            reason = "entry #\(seq) is from epoch \(epoch), but this device never received the commit that started it"
        } else {
            return nil
        }
        if record.divergence == nil { record.divergence = reason }
        return Result(record: record, event: .diverged(seq: seq, reason: reason))
    }

    private func processCommit(
        _ signed: WireSignedGroupCommit, sealedEpoch: UInt64, seq: UInt64, record: GroupRecord, key: KeyLookup
    ) throws -> Result {
        let verified: VerifiedGroupCommit
        do {
            verified = try VerifiedGroupCommit.verify(signed)
        } catch {
            return Result(record: record, event: .rejected(seq: seq, reason: .badSignature(error.description)))
        }
        // A commit sealed under another epoch's key than the one it names
        // opens only for members who hold that key: members who joined
        // since would skip it while the others apply it. Nobody applies it.
        guard verified.commit.epoch == sealedEpoch else {
            return Result(
                record: record,
                event: .rejected(
                    seq: seq,
                    reason: .malformed("commit of epoch \(verified.commit.epoch) sealed under epoch \(sealedEpoch)")))
        }
        var record = record
        let previousEpoch = record.state.epoch
        let outcome = record.state.apply(verified)
        var newKey: (UInt64, SymmetricKey)?
        var inviteSeed: SymmetricKey?
        var deleted = false
        if case .applied(let effects) = outcome {
            for effect in effects {
                switch effect {
                case .created where verified.author.inboxID == identity.inboxID:
                    record.status = .active
                case .memberRemoved(let inbox) where inbox == identity.inboxID:
                    record.status = .removed
                case .memberLeft(let inbox) where inbox == identity.inboxID:
                    record.status = .left
                case .deleted:
                    // After the epoch's key is derived (the effects list
                    // it last): the deletion's own epoch is complete too.
                    deleted = true
                case .epochAdvanced(let epoch, let commitID, let fresh):
                    guard record.status == .active || record.status == .creating else { break }
                    let previous = try key(previousEpoch)
                    if let fresh {
                        newKey =
                            (try? EpochKeys.open(
                                fresh.sealed, as: identity, groupID: record.groupID, epoch: epoch,
                                commitment: fresh.commitment)).map { (epoch, $0) }
                        // Whoever was not given the fresh key loses the topic.
                        if let (_, freshKey) = newKey {
                            record.accessSecret = TopicAccess.secret(fromEpochKey: freshKey).withUnsafeBytes {
                                Data($0)
                            }
                        }
                    } else if let previous {
                        newKey = (epoch, EpochKeys.derive(from: previous, epoch: epoch, commitID: commitID))
                    }
                    if let previous {
                        record.epochLink = CommitSealing.epochLink(
                            previousEpochKey: previous, groupID: record.groupID, epoch: epoch,
                            transcript: record.state.transcript)
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
        if deleted { record.status = .deleted }
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
        key: KeyLookup, receivedAt: Date
    ) throws -> Result {
        let seq = envelope.seq
        func reject(_ reason: GroupEntryRejection) -> Result {
            Result(record: record, event: .rejected(seq: seq, reason: reason))
        }
        guard ciphertext.epoch <= record.state.epoch else { return reject(.futureEpoch(ciphertext.epoch)) }
        guard let epochKey = try key(ciphertext.epoch) else { return reject(.noKeyForEpoch(ciphertext.epoch)) }
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
        // The preferences at this point of the log decide, the same for
        // every member.
        let preferences = record.state.preferences
        if let key = GroupPreferences.key(forContentType: content.type), !preferences.allows(key, role: member.role) {
            return reject(.notAllowedByPreference(key, member.inboxID))
        }
        let sentAt = Date(milliseconds: verified.body.sentAtMs)
        var deletion: MessageDeletionOrder?
        if content.type.authorityID == MessageDeletionCodec.contentType.authority,
            content.type.typeID == MessageDeletionCodec.contentType.type
        {
            guard let asked = try? MessageDeletionCodec().decode(content) else {
                return reject(.malformed("message deletion"))
            }
            deletion = MessageDeletionOrder(
                messageID: asked.messageID, sender: member.inboxID, moderates: member.role >= .moderator,
                full: preferences.allows(.fullDeletion, role: member.role))
        }
        let decoded = codecs.decode(content)
        let message = StoredMessage(
            id: verified.messageID.hexString, conversation: record.groupID,
            outgoing: verified.sender.inboxID == identity.inboxID, sender: verified.sender.inboxID,
            senderName: member.identity.displayName,
            sentAt: sentAt, receivedAt: receivedAt,
            topic: envelope.topic, seq: seq, contentType: decoded.contentType.description,
            encodedContent: FrameCodec.encode(content), displayText: decoded.displayText, isKnownType: decoded.isKnown)
        // A timed message lives the group's TTL at its position, from when
        // it was sent (a sender's clock far ahead cannot make it outlive
        // the TTL from when it arrived).
        let expiresAt = preferences.messageTTLSeconds.map {
            min(sentAt, receivedAt).addingTimeInterval(TimeInterval($0))
        }
        return Result(record: record, event: .message(message), messageExpiresAt: expiresAt, deletion: deletion)
    }
}
