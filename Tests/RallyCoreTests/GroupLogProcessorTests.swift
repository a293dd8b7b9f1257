import Crypto
import Foundation
import RallyCrypto
import RallyWire
import Testing

@testable import RallyCore

/// One member's client reading the group log: its record and the epoch
/// keys it holds, updated exactly as `RallyClient` persists them.
struct GroupClientSim {
    let identity: Identity
    var record: GroupRecord
    var keys: [UInt64: SymmetricKey]
    var events: [GroupLogEvent] = []

    static let receivedAt = Date(timeIntervalSince1970: 1_700_000_100)

    @discardableResult
    mutating func process(_ envelope: WireEnvelope) -> GroupLogEvent {
        let keys = self.keys
        let processor = GroupLogProcessor(identity: identity, codecs: .standard)
        let result = processor.process(envelope, record: record, key: { keys[$0] }, receivedAt: Self.receivedAt)
        record = result.record
        if let (epoch, key) = result.newKey { self.keys[epoch] = key }
        events.append(result.event)
        return result.event
    }

    func keyBytes(_ epoch: UInt64) -> Data? { keys[epoch].map { $0.withUnsafeBytes { Data($0) } } }
}

/// Olive created the group and added Ada (admin), Bea (member) and Vic
/// (observer); each newcomer joined from a welcome (Olive's snapshot and
/// current key) and read the log from there on. Everyone is at epoch 4.
struct GroupLogScenario {
    typealias T = GroupTest

    var owner: GroupClientSim
    var admin: GroupClientSim
    var member: GroupClientSim
    var observer: GroupClientSim
    private(set) var log: [WireEnvelope] = []

    struct SetupFailed: Error { let what: String }

    init() throws {
        let olive = T.identity("Olive")
        owner = GroupClientSim(
            identity: olive,
            record: GroupRecord(
                groupID: T.groupID, topicID: T.topicID, state: GroupState(groupID: T.groupID), status: .creating),
            keys: [1: EpochKeys.newKey()])
        admin = GroupClientSim(identity: T.identity("Ada"), record: owner.record, keys: [:])
        member = GroupClientSim(identity: T.identity("Bea"), record: owner.record, keys: [:])
        observer = GroupClientSim(identity: T.identity("Vic"), record: owner.record, keys: [:])

        _ = publish(T.signed(T.commit(T.create(), by: olive, epoch: 0), by: olive), readers: [\.owner])
        guard owner.record.status == .active else { throw SetupFailed(what: "create") }
        var readers: [WritableKeyPath<GroupLogScenario, GroupClientSim>] = [\.owner]
        for (newcomer, role) in [
            (\GroupLogScenario.admin, GroupRole.admin), (\.member, .member), (\.observer, .observer),
        ] {
            let add = T.commit(
                T.add(self[keyPath: newcomer].identity.publicIdentity, as: role), by: olive,
                epoch: owner.record.state.epoch)
            _ = publish(T.signed(add, by: olive), readers: readers)
            try welcome(newcomer)
            readers.append(newcomer)
        }
    }

    /// What `acceptWelcome` stores: the adder's snapshot and current key.
    private mutating func welcome(_ newcomer: WritableKeyPath<GroupLogScenario, GroupClientSim>) throws {
        let epoch = owner.record.state.epoch
        guard let key = owner.keys[epoch] else { throw SetupFailed(what: "owner has no key for epoch \(epoch)") }
        self[keyPath: newcomer].record = GroupRecord(
            groupID: T.groupID, topicID: T.topicID, state: try T.restored(owner.record.state), status: .active)
        self[keyPath: newcomer].keys = [epoch: key]
    }

    var everyone: [WritableKeyPath<GroupLogScenario, GroupClientSim>] { [\.owner, \.admin, \.member, \.observer] }

    /// Appends an entry to the log and lets `readers` process it; returns
    /// each reader's event in order.
    mutating func publish(
        payload: Data, readers: [WritableKeyPath<GroupLogScenario, GroupClientSim>]? = nil
    ) -> [GroupLogEvent] {
        let envelope = T.envelope(payload, seq: UInt64(log.count + 1))
        log.append(envelope)
        return (readers ?? everyone).map { self[keyPath: $0].process(envelope) }
    }

    mutating func publish(
        _ signed: WireSignedGroupCommit, readers: [WritableKeyPath<GroupLogScenario, GroupClientSim>]? = nil
    ) -> [GroupLogEvent] {
        publish(payload: T.entryPayload(signed), readers: readers)
    }

    /// A text message encrypted under `key` for `epoch`, as `sendGroupText`
    /// builds it.
    static func message(_ text: String, from sender: Identity, epoch: UInt64, key: SymmetricKey) throws -> Data {
        var body = WireMessageBody()
        body.messageID = MessageSealing.newMessageID()
        body.sender = sender.publicIdentity.wireBundle
        body.recipient = T.groupID
        body.sentAtMs = 1_700_000_000_500
        body.content = try TextCodec().encode(text)
        var entry = WireGroupLogEntry()
        entry.message = try EpochKeys.encrypt(
            MessageSealing.sign(body, by: sender), key: key, groupID: T.groupID, epoch: epoch)
        return FrameCodec.encode(entry)
    }

    /// Ada removes Bea with a fresh key sealed to Olive, Ada and Vic.
    mutating func adminRemovesMember() throws -> (
        commit: WireGroupCommit, fresh: GroupFreshKey, events: [GroupLogEvent]
    ) {
        let state = admin.record.state
        var commit = T.commit(T.remove(member.identity.inboxID), by: admin.identity, epoch: state.epoch)
        let remaining = state.sortedMembers.map(\.identity).filter { $0.inboxID != member.identity.inboxID }
        let fresh = try T.attachFreshKey(to: &commit, for: remaining)
        let events = publish(T.signed(commit, by: admin.identity))
        return (commit, fresh, events)
    }
}

extension GroupLogEvent {
    var outcome: GroupOutcome? { if case .commit(_, _, _, let outcome) = self { outcome } else { nil } }
    var message: StoredMessage? { if case .message(let message) = self { message } else { nil } }
    var rejection: GroupEntryRejection? { if case .rejected(_, let reason) = self { reason } else { nil } }
}

@Suite("Group log processor")
struct GroupLogProcessorTests {
    typealias T = GroupTest
    typealias S = GroupLogScenario

    @Test func membersWhoJoinedByWelcomeAgreeOnStateAndDerivedKey() throws {
        let s = try S()
        let states = [s.owner, s.admin, s.member, s.observer].map(\.record.state)
        #expect(states.allSatisfy { $0 == s.owner.record.state })
        #expect(s.owner.record.state.epoch == 4)
        let key = try #require(s.owner.keyBytes(4))
        #expect([s.admin, s.member, s.observer].allSatisfy { $0.keyBytes(4) == key })
        #expect([s.owner, s.admin, s.member, s.observer].allSatisfy { $0.record.status == .active })
    }

    @Test func aRemainingMemberObtainsTheFreshKeyTheRemoverSealed() throws {
        var s = try S()
        let (commit, fresh, events) = try s.adminRemovesMember()
        let expected = GroupOutcome.applied([
            .memberRemoved(s.member.identity.inboxID),
            .epochAdvanced(
                epoch: 5, commitID: commit.commitID,
                freshKey: FreshEpochKey(sealed: fresh.sealed, commitment: fresh.commitment)),
        ])
        #expect(events.map(\.outcome) == Array(repeating: expected, count: 4))
        for client in [s.owner, s.admin, s.observer] {
            #expect(client.keyBytes(5) == fresh.bytes, "\(client.identity.displayName)")
            #expect(client.keyBytes(5) != client.keyBytes(4))
            #expect(client.record.status == .active)
            #expect(client.record.state.members[s.member.identity.inboxID] == nil)
        }
    }

    @Test func theRemovedMemberGetsNoKeyAndStatusRemoved() throws {
        var s = try S()
        _ = try s.adminRemovesMember()
        #expect(s.member.record.status == .removed)
        #expect(s.member.keys[5] == nil)
        #expect(s.member.record.state == s.owner.record.state)
    }

    @Test func aMessageUnderTheNewEpochDecryptsForMembersButNotForTheRemovedMember() throws {
        var s = try S()
        _ = try s.adminRemovesMember()
        let key = try #require(s.owner.keys[5])
        let events = s.publish(payload: try S.message("after the removal", from: s.owner.identity, epoch: 5, key: key))
        for (client, event) in zip([s.owner, s.admin, s.observer], [events[0], events[1], events[3]]) {
            let message = try #require(event.message, "\(client.identity.displayName): \(event)")
            #expect(message.displayText == "after the removal")
            #expect(message.sender == s.owner.identity.inboxID)
            #expect(message.conversation == T.groupID)
            #expect(message.seq == UInt64(s.log.count))
            #expect(message.outgoing == (client.identity.inboxID == s.owner.identity.inboxID))
        }
        #expect(events[2].rejection == .noKeyForEpoch(5))
    }

    @Test func theRemovedMembersMessageWithTheOldKeyIsRejectedAfterTheRemoval() throws {
        var s = try S()
        let oldKey = try #require(s.member.keys[4])
        // Before the removal Bea may send at epoch 4.
        let before = s.publish(payload: try S.message("still here", from: s.member.identity, epoch: 4, key: oldKey))
        #expect(before.allSatisfy { $0.message?.displayText == "still here" })

        _ = try s.adminRemovesMember()
        let after = s.publish(
            payload: try S.message("let me back in", from: s.member.identity, epoch: 4, key: oldKey),
            readers: [\.owner, \.admin, \.observer])
        #expect(after.map(\.rejection) == Array(repeating: .senderNotAMember(s.member.identity.inboxID), count: 3))
    }

    @Test func anObserversMessageIsRejected() throws {
        var s = try S()
        let key = try #require(s.observer.keys[4])
        let events = s.publish(payload: try S.message("may I?", from: s.observer.identity, epoch: 4, key: key))
        #expect(
            events.map(\.rejection)
                == Array(repeating: .senderMayNotSend(s.observer.identity.inboxID, .observer), count: 4))
    }

    @Test func aMessageClaimingAFutureEpochIsRejected() throws {
        var s = try S()
        let events = s.publish(
            payload: try S.message("from the future", from: s.admin.identity, epoch: 5, key: EpochKeys.newKey()))
        #expect(events.map(\.rejection) == Array(repeating: .futureEpoch(5), count: 4))
    }

    @Test func aMessageUnderTheWrongKeyIsUndecryptable() throws {
        var s = try S()
        let events = s.publish(
            payload: try S.message("wrong key", from: s.admin.identity, epoch: 4, key: EpochKeys.newKey()))
        #expect(
            events.map(\.rejection)
                == Array(repeating: .undecryptable(RallyCryptoError.decryptionFailed.description), count: 4))
    }

    @Test func garbageEntriesAreMalformedAndChangeNothing() throws {
        var s = try S()
        let before = [s.owner, s.admin, s.member, s.observer].map(\.record)
        let keysBefore = [s.owner, s.admin, s.member, s.observer].map { $0.keys.count }

        for payload in [Data([0xFF, 0xFF, 0xFF]), Data("not a protobuf at all".utf8), Data()] {
            let events = s.publish(payload: payload)
            #expect(events.allSatisfy { if case .malformed? = $0.rejection { true } else { false } }, "\(events)")
        }
        // An entry with only a field this client does not know: no commit,
        // no message. (An entry with no fields at all is zero bytes.)
        let empty = s.publish(payload: Data([0x18, 0x01]))
        #expect(empty.allSatisfy { $0.rejection == .malformed("empty entry") }, "\(empty)")

        var forged = T.signed(T.commit(T.leave, by: s.admin.identity, epoch: 4), by: s.member.identity)
        forged.signature[0] ^= 0x01
        let badSignature = s.publish(forged)
        #expect(badSignature.allSatisfy { if case .badSignature? = $0.rejection { true } else { false } })

        #expect([s.owner, s.admin, s.member, s.observer].map(\.record) == before)
        #expect([s.owner, s.admin, s.member, s.observer].map { $0.keys.count } == keysBefore)
    }

    @Test func aLeaverStopsGettingKeysWhileTheOthersDeriveTheNextOne() throws {
        var s = try S()
        let leave = T.commit(T.leave, by: s.member.identity, epoch: 4)
        _ = s.publish(T.signed(leave, by: s.member.identity))
        #expect(s.member.record.status == .left)
        #expect(s.member.keys[5] == nil)
        let derived = EpochKeys.derive(from: try #require(s.owner.keys[4]), epoch: 5, commitID: leave.commitID)
        for client in [s.owner, s.admin, s.observer] {
            #expect(client.keyBytes(5) == derived.withUnsafeBytes { Data($0) })
            #expect(client.record.state.needsRekey)
        }
    }

    @Test func aStaleCommitIsReportedAsRejectedAndGivesNoKey() throws {
        var s = try S()
        let first = T.commit(T.changeRole(s.member.identity.inboxID, to: .moderator), by: s.admin.identity, epoch: 4)
        let second = T.commit(T.changeRole(s.observer.identity.inboxID, to: .member), by: s.owner.identity, epoch: 4)
        _ = s.publish(T.signed(first, by: s.admin.identity))
        let keys = s.owner.keys
        let events = s.publish(T.signed(second, by: s.owner.identity))
        #expect(events.map(\.outcome) == Array(repeating: .rejected(.staleEpoch(commit: 4, current: 5)), count: 4))
        #expect(s.owner.keys.keys.sorted() == keys.keys.sorted())
        #expect(s.owner.record.state.role(of: s.observer.identity.inboxID) == .observer)
    }
}
