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
    mutating func process(_ envelope: WireEnvelope) throws -> GroupLogEvent {
        let keys = self.keys
        let processor = GroupLogProcessor(identity: identity, codecs: .standard)
        let result = try processor.process(envelope, record: record, key: { keys[$0] }, receivedAt: Self.receivedAt)
        record = result.record
        if let (epoch, key) = result.newKey { self.keys[epoch] = key }
        events.append(result.event)
        return result.event
    }

    func keyBytes(_ epoch: UInt64) -> Data? { keys[epoch].map { $0.withUnsafeBytes { Data($0) } } }

    /// A commit building on this member's state, drafted as the SDK drafts it.
    func commit(_ action: WireGroupCommit.OneOf_Action?) -> WireGroupCommit {
        GroupTest.commit(action, by: identity, on: record.state)
    }

    /// The log entry of `commit`, signed by this member and sealed as the
    /// SDK seals it: under the commit key of the commit's epoch, with this
    /// member's transcript and epoch link.
    func sealedEntry(_ commit: WireGroupCommit) throws -> Data {
        let key = try #require(keys[commit.epoch], "\(identity.displayName) has no key for epoch \(commit.epoch)")
        return GroupTest.entryPayload(
            try GroupTest.sealed(
                GroupTest.signed(commit, by: identity), epoch: commit.epoch, epochKey: key,
                groupID: record.groupID, transcript: record.state.transcript, epochLink: record.epochLink))
    }

    /// A text message at this member's epoch, as `sendGroupText` builds it.
    func message(_ text: String, from sender: Identity? = nil) throws -> Data {
        let epoch = record.state.epoch
        let key = try #require(keys[epoch], "\(identity.displayName) has no key for epoch \(epoch)")
        return try GroupLogScenario.message(
            text, from: sender ?? identity, epoch: epoch, key: key, transcript: record.state.transcript,
            epochLink: record.epochLink)
    }
}

/// Olive created the group and added Ada (admin), Bea (member) and Vic
/// (observer); each newcomer joined from a welcome (the snapshot after its
/// admission, that epoch's key and link) and read the log from there on.
/// Everyone is at epoch 4.
struct GroupLogScenario {
    typealias T = GroupTest
    typealias Reader = WritableKeyPath<GroupLogScenario, GroupClientSim>

    var owner: GroupClientSim
    var admin: GroupClientSim
    var member: GroupClientSim
    var observer: GroupClientSim
    private(set) var log: [WireEnvelope] = []

    struct SetupFailed: Error { let what: String }

    init() throws {
        let olive = T.identity("Olive")
        // The first key is epoch 0's: the create commit is sealed under it.
        owner = GroupClientSim(
            identity: olive,
            record: GroupRecord(
                groupID: T.groupID, topicID: T.topicID, state: GroupState(groupID: T.groupID), status: .creating),
            keys: [0: EpochKeys.newKey()])
        admin = GroupClientSim(identity: T.identity("Ada"), record: owner.record, keys: [:])
        member = GroupClientSim(identity: T.identity("Bea"), record: owner.record, keys: [:])
        observer = GroupClientSim(identity: T.identity("Vic"), record: owner.record, keys: [:])

        _ = try publish(by: \.owner, T.create(), readers: [\.owner])
        guard owner.record.status == .active else { throw SetupFailed(what: "create") }
        var readers: [Reader] = [\.owner]
        for (newcomer, role) in [
            (\GroupLogScenario.admin, GroupRole.admin), (\.member, .member), (\.observer, .observer),
        ] {
            _ = try publish(
                by: \.owner, T.add(self[keyPath: newcomer].identity.publicIdentity, as: role), readers: readers)
            try welcome(newcomer)
            readers.append(newcomer)
        }
    }

    /// What `acceptWelcome` stores: the adder's snapshot, current key and
    /// epoch link.
    private mutating func welcome(_ newcomer: Reader) throws {
        let epoch = owner.record.state.epoch
        guard let key = owner.keys[epoch] else { throw SetupFailed(what: "owner has no key for epoch \(epoch)") }
        self[keyPath: newcomer].record = GroupRecord(
            groupID: T.groupID, topicID: T.topicID, state: try T.restored(owner.record.state), status: .active,
            epochLink: owner.record.epochLink)
        self[keyPath: newcomer].keys = [epoch: key]
    }

    var everyone: [Reader] { [\.owner, \.admin, \.member, \.observer] }

    /// Appends an entry to the log and lets `readers` process it; returns
    /// each reader's event in order.
    mutating func publish(payload: Data, control: Bool = false, readers: [Reader]? = nil) throws -> [GroupLogEvent] {
        var envelope = T.envelope(payload, seq: UInt64(log.count + 1))
        envelope.control = control
        log.append(envelope)
        return try (readers ?? everyone).map { try self[keyPath: $0].process(envelope) }
    }

    /// Publishes `commit` as `author`'s client does: signed, sealed, as a
    /// control entry.
    mutating func publish(
        _ commit: WireGroupCommit, by author: Reader, readers: [Reader]? = nil
    ) throws -> [GroupLogEvent] {
        try publish(payload: self[keyPath: author].sealedEntry(commit), control: true, readers: readers)
    }

    /// `action` built on `author`'s state, published as `author`'s client does.
    mutating func publish(
        by author: Reader, _ action: WireGroupCommit.OneOf_Action?, readers: [Reader]? = nil
    ) throws -> [GroupLogEvent] {
        try publish(self[keyPath: author].commit(action), by: author, readers: readers)
    }

    /// A text message encrypted under `key` for `epoch`, carrying
    /// `transcript` and `epochLink`, as `sendGroupText` builds it.
    static func message(
        _ text: String, from sender: Identity, epoch: UInt64, key: SymmetricKey, transcript: Data = Data(),
        epochLink: Data = Data()
    ) throws -> Data {
        var body = WireMessageBody()
        body.messageID = MessageSealing.newMessageID()
        body.sender = sender.publicIdentity.wireBundle
        body.recipient = T.groupID
        body.sentAtMs = 1_700_000_000_500
        body.content = try TextCodec().encode(text)
        var ciphertext = try EpochKeys.encrypt(
            MessageSealing.sign(body, by: sender), key: key, groupID: T.groupID, epoch: epoch)
        ciphertext.transcript = transcript
        ciphertext.epochLink = epochLink
        var entry = WireGroupLogEntry()
        entry.message = ciphertext
        return FrameCodec.encode(entry)
    }

    /// Ada removes Bea with a fresh key sealed to Olive, Ada and Vic.
    mutating func adminRemovesMember(
        readers: [Reader]? = nil
    ) throws -> (
        commit: WireGroupCommit, fresh: GroupFreshKey, events: [GroupLogEvent]
    ) {
        let state = admin.record.state
        var commit = admin.commit(T.remove(member.identity.inboxID))
        let remaining = state.sortedMembers.map(\.identity).filter { $0.inboxID != member.identity.inboxID }
        let fresh = try T.attachFreshKey(to: &commit, for: remaining)
        let events = try publish(commit, by: \.admin, readers: readers)
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
        #expect(s.owner.keys[5] == key)
        let events = try s.publish(payload: s.owner.message("after the removal"))
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
        let before = try s.publish(payload: s.member.message("still here"))
        #expect(before.allSatisfy { $0.message?.displayText == "still here" })

        _ = try s.adminRemovesMember()
        let after = try s.publish(
            payload: try S.message("let me back in", from: s.member.identity, epoch: 4, key: oldKey),
            readers: [\.owner, \.admin, \.observer])
        #expect(after.map(\.rejection) == Array(repeating: .senderNotAMember(s.member.identity.inboxID), count: 3))
    }

    @Test func anObserversMessageIsRejected() throws {
        var s = try S()
        let key = try #require(s.observer.keys[4])
        #expect(s.observer.keys[4] == key)
        let events = try s.publish(payload: s.observer.message("may I?"))
        #expect(
            events.map(\.rejection)
                == Array(repeating: .senderMayNotSend(s.observer.identity.inboxID, .observer), count: 4))
    }

    @Test func aMessageClaimingAFutureEpochIsRejected() throws {
        var s = try S()
        let events = try s.publish(
            payload: try S.message("from the future", from: s.admin.identity, epoch: 5, key: EpochKeys.newKey()))
        #expect(events.map(\.rejection) == Array(repeating: .futureEpoch(5), count: 4))
    }

    @Test func aMessageUnderTheWrongKeyIsUndecryptable() throws {
        var s = try S()
        let events = try s.publish(
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
            let events = try s.publish(payload: payload)
            #expect(events.allSatisfy { if case .malformed? = $0.rejection { true } else { false } }, "\(events)")
        }
        // An entry with only a field this client does not know: no commit,
        // no message. (An entry with no fields at all is zero bytes.)
        let empty = try s.publish(payload: Data([0x18, 0x01]))
        #expect(empty.allSatisfy { $0.rejection == .malformed("empty entry") }, "\(empty)")

        var forged = try T.signed(s.admin.commit(T.leave), by: s.member.identity)
        forged.signature[0] ^= 0x01
        let sealedForgery = try T.sealed(
            forged, epoch: 4, epochKey: try #require(s.admin.keys[4]), transcript: s.admin.record.state.transcript,
            epochLink: s.admin.record.epochLink)
        let badSignature = try s.publish(payload: T.entryPayload(sealedForgery))
        #expect(badSignature.allSatisfy { if case .badSignature? = $0.rejection { true } else { false } })

        #expect([s.owner, s.admin, s.member, s.observer].map(\.record) == before)
        #expect([s.owner, s.admin, s.member, s.observer].map { $0.keys.count } == keysBefore)
    }

    @Test func aLeaverStopsGettingKeysWhileTheOthersDeriveTheNextOne() throws {
        var s = try S()
        let leave = s.member.commit(T.leave)
        _ = try s.publish(leave, by: \.member)
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
        let first = s.admin.commit(T.changeRole(s.member.identity.inboxID, to: .moderator))
        let second = s.owner.commit(T.changeRole(s.observer.identity.inboxID, to: .member))
        // The loser sealed its commit before reading the winner's.
        let losing = try s.owner.sealedEntry(second)
        _ = try s.publish(first, by: \.admin)
        let keys = s.owner.keys
        let events = try s.publish(payload: losing, control: true)
        #expect(events.map(\.outcome) == Array(repeating: .rejected(.staleEpoch(commit: 4, current: 5)), count: 4))
        #expect(s.owner.keys.keys.sorted() == keys.keys.sorted())
        #expect(s.owner.record.state.role(of: s.observer.identity.inboxID) == .observer)
    }

    // MARK: Sealed commits and the transcript chain (ADR 0008)

    @Test func everyMemberComputesTheSameTranscriptAndEpochLink() throws {
        let s = try S()
        let owner = s.owner.record
        #expect([s.admin, s.member, s.observer].allSatisfy { $0.record.epochLink == owner.epochLink })
        let key3 = try #require(s.owner.keys[3])
        #expect(
            owner.epochLink
                == CommitSealing.epochLink(
                    previousEpochKey: key3, groupID: T.groupID, epoch: 4, transcript: owner.state.transcript))
        // Every commit was a control entry.
        #expect(owner.lastControlSeq == 4)
        #expect(owner.divergence == nil)
    }

    @Test func aCommitInTheClearIsRejectedAsUnsealed() throws {
        var s = try S()
        let before = [s.owner, s.admin, s.member, s.observer].map(\.record.state)
        let commit = s.owner.commit(T.updateProfile("In the clear"))
        let events = try s.publish(payload: T.plainEntryPayload(T.signed(commit, by: s.owner.identity)), control: true)
        #expect(events.map(\.rejection) == Array(repeating: .unsealedCommit, count: 4))
        #expect([s.owner, s.admin, s.member, s.observer].map(\.record.state) == before)
        // The entry still counts as the topic's last control entry.
        #expect([s.owner, s.admin, s.member, s.observer].allSatisfy { $0.record.lastControlSeq == 5 })
    }

    @Test func aSealedCommitUnderAKeyNoMemberHoldsIsUndecryptable() throws {
        var s = try S()
        let commit = s.owner.commit(T.updateProfile("Elsewhere"))
        let sealed = try T.sealed(
            T.signed(commit, by: s.owner.identity), epoch: 4, epochKey: EpochKeys.newKey(),
            transcript: s.owner.record.state.transcript, epochLink: s.owner.record.epochLink)
        let events = try s.publish(payload: T.entryPayload(sealed), control: true)
        #expect(
            events.map(\.rejection)
                == Array(repeating: .undecryptable(RallyCryptoError.decryptionFailed.description), count: 4))
        #expect(s.owner.record.state.profile.name == "Hikers")
    }

    /// A member that holds an older key could seal a commit naming the
    /// current epoch under it: members who joined since could not open it
    /// while the others applied it, and the group would split. Every
    /// member must reject it alike.
    @Test func aCommitSealedUnderAnOlderEpochThanItNamesIsRejectedByEveryMember() throws {
        var s = try S()
        let commit = s.owner.commit(T.updateProfile("Split"))
        let key3 = try #require(s.owner.keys[3])
        let sealed = try T.sealed(T.signed(commit, by: s.owner.identity), epoch: 3, epochKey: key3)
        let events = try s.publish(payload: T.entryPayload(sealed), control: true)
        // Vic joined at epoch 4 and cannot open it at all.
        #expect(events[3].rejection == .noKeyForEpoch(3))
        #expect(events.allSatisfy { $0.outcome == nil }, "\(events)")
        let states = [s.owner, s.admin, s.member, s.observer].map(\.record.state)
        #expect(states.allSatisfy { $0 == s.observer.record.state })
        #expect(s.owner.record.state.profile.name == "Hikers")
    }

    @Test func theCreateCommitIsSealedUnderEpochZerosKeyAndKeyOneDerivesFromIt() throws {
        let olive = T.identity("Olive")
        let key0 = EpochKeys.newKey()
        var owner = GroupClientSim(
            identity: olive,
            record: GroupRecord(
                groupID: T.groupID, topicID: T.topicID, state: GroupState(groupID: T.groupID), status: .creating),
            keys: [0: key0])
        let create = owner.commit(T.create())
        #expect(create.epoch == 0)
        #expect(create.parentTranscript == CommitSealing.initialTranscript(groupID: T.groupID))
        var envelope = T.envelope(try owner.sealedEntry(create), seq: 1)
        envelope.control = true
        let event = try owner.process(envelope)
        guard case .commit(_, _, _, .applied) = event else {
            Issue.record("expected the create to apply, got \(event)")
            return
        }
        #expect(owner.record.status == .active)
        let derived = EpochKeys.derive(from: key0, epoch: 1, commitID: create.commitID)
        #expect(owner.keyBytes(1) == derived.withUnsafeBytes { Data($0) })
        #expect(
            owner.record.epochLink
                == CommitSealing.epochLink(
                    previousEpochKey: key0, groupID: T.groupID, epoch: 1, transcript: owner.record.state.transcript))
        #expect(owner.record.lastControlSeq == 1)

        // The same create sealed under any other key does not open.
        var other = GroupClientSim(
            identity: olive,
            record: GroupRecord(
                groupID: T.groupID, topicID: T.topicID, state: GroupState(groupID: T.groupID), status: .creating),
            keys: [0: EpochKeys.newKey()])
        #expect(
            try other.process(envelope).rejection == .undecryptable(RallyCryptoError.decryptionFailed.description))
        #expect(other.record.status == .creating)
    }

    @Test func aFreshKeyMovesTheAccessSecretOfTheMembersGivenItOnly() throws {
        var s = try S()
        let before = s.member.record.accessSecret
        let (_, fresh, _) = try s.adminRemovesMember()
        let expected = TopicAccess.secret(fromEpochKey: fresh.key).withUnsafeBytes { Data($0) }
        for client in [s.owner, s.admin, s.observer] {
            #expect(client.record.accessSecret == expected, "\(client.identity.displayName)")
        }
        #expect(s.member.record.accessSecret == before)
        #expect(s.member.record.accessSecret != expected)
    }

    @Test func theLastControlSeqFollowsControlEntriesOnly() throws {
        var s = try S()
        #expect(s.owner.record.lastControlSeq == 4)
        // A message is no control entry.
        _ = try s.publish(payload: s.owner.message("hello"))
        #expect(s.owner.record.lastControlSeq == 4)
        // Junk flagged as control counts: the relay stored it as one.
        _ = try s.publish(payload: Data([0xFF]), control: true)
        #expect([s.owner, s.admin, s.member, s.observer].allSatisfy { $0.record.lastControlSeq == 6 })
        // A redelivered older control entry does not move it back.
        var old = s.log[0]
        old.control = true
        try s.owner.process(old)
        #expect(s.owner.record.lastControlSeq == 6)
    }

    // MARK: Divergence

    @Test func aMemberThatMissedARemovalDivergesOnTheNextEpochsMessage() throws {
        var s = try S()
        // The relay withholds the removal from Vic.
        _ = try s.adminRemovesMember(readers: [\.owner, \.admin, \.member])
        let events = try s.publish(payload: s.owner.message("after the removal"), readers: [\.observer])
        guard case .diverged(let seq, _) = events[0] else {
            Issue.record("expected divergence, got \(events[0])")
            return
        }
        #expect(seq == UInt64(s.log.count))
        #expect(s.observer.record.divergence != nil)
        #expect(s.observer.record.state.epoch == 4)
    }

    @Test func aMemberThatMissedACommitDivergesOnTheNextEpochsCommit() throws {
        var s = try S()
        _ = try s.adminRemovesMember(readers: [\.owner, \.admin, \.member])
        let events = try s.publish(by: \.owner, T.updateProfile("Climbers"), readers: [\.owner, \.admin, \.observer])
        #expect(events[0].outcome != nil && events[1].outcome != nil)
        guard case .diverged = events[2] else {
            Issue.record("expected divergence, got \(events[2])")
            return
        }
        let reason = try #require(s.observer.record.divergence)
        #expect(reason.contains("epoch 5"))
        // The first reason stays: a later one does not replace it.
        _ = try s.publish(payload: s.owner.message("again"), readers: [\.observer])
        #expect(s.observer.record.divergence == reason)
        #expect(s.owner.record.divergence == nil && s.admin.record.divergence == nil)
    }

    @Test func junkClaimingTheNextEpochWithoutAValidLinkDoesNotMarkDivergence() throws {
        var s = try S()
        let transcript = Data(repeating: 7, count: 32)
        let wrongLinks = [
            Data(),
            Data(repeating: 1, count: 32),
            // Keyed by a key no member holds.
            CommitSealing.epochLink(
                previousEpochKey: EpochKeys.newKey(), groupID: T.groupID, epoch: 5, transcript: transcript),
            // Keyed right, but over another transcript than the entry names.
            CommitSealing.epochLink(
                previousEpochKey: try #require(s.owner.keys[4]), groupID: T.groupID, epoch: 5,
                transcript: Data(repeating: 8, count: 32)),
        ]
        for link in wrongLinks {
            let events = try s.publish(
                payload: S.message(
                    "from the future", from: s.admin.identity, epoch: 5, key: EpochKeys.newKey(),
                    transcript: transcript,
                    epochLink: link))
            #expect(events.map(\.rejection) == Array(repeating: .futureEpoch(5), count: 4))
            let sealed = try T.sealed(
                T.signed(T.commit(T.leave, by: s.admin.identity, epoch: 5), by: s.admin.identity), epoch: 5,
                epochKey: EpochKeys.newKey(), transcript: transcript, epochLink: link)
            let commitEvents = try s.publish(payload: T.entryPayload(sealed), control: true)
            #expect(commitEvents.map(\.rejection) == Array(repeating: .noKeyForEpoch(5), count: 4))
        }
        #expect([s.owner, s.admin, s.member, s.observer].allSatisfy { $0.record.divergence == nil })
    }

    @Test func anEntryOfTheCurrentEpochOnAnotherTranscriptMarksDivergence() throws {
        var s = try S()
        let other = Data(repeating: 0xAB, count: 32)
        let key3 = try #require(s.owner.keys[3])
        let link = CommitSealing.epochLink(previousEpochKey: key3, groupID: T.groupID, epoch: 4, transcript: other)
        let payload = try S.message(
            "from another history", from: s.owner.identity, epoch: 4, key: try #require(s.owner.keys[4]),
            transcript: other, epochLink: link)
        let events = try s.publish(payload: payload)
        // Olive, Ada and Bea held epoch 3's key and authenticate the link.
        for (client, event) in zip([s.owner, s.admin, s.member], events) {
            guard case .diverged = event else {
                Issue.record("\(client.identity.displayName): expected divergence, got \(event)")
                continue
            }
            #expect(client.record.divergence != nil)
        }
        // Vic joined at epoch 4 and never held epoch 3's key: the link
        // proves nothing to him, so the entry is judged as usual.
        #expect(events[3].message != nil)
        #expect(s.observer.record.divergence == nil)
    }

    @Test func aSealedCommitOnAnotherTranscriptOfTheCurrentEpochMarksDivergence() throws {
        var s = try S()
        let other = Data(repeating: 0xCD, count: 32)
        let key3 = try #require(s.owner.keys[3])
        let commit = T.commit(T.updateProfile("Fork"), by: s.owner.identity, epoch: 4, parentTranscript: other)
        let sealed = try T.sealed(
            T.signed(commit, by: s.owner.identity), epoch: 4, epochKey: try #require(s.owner.keys[4]),
            transcript: other,
            epochLink: CommitSealing.epochLink(previousEpochKey: key3, groupID: T.groupID, epoch: 4, transcript: other))
        let events = try s.publish(payload: T.entryPayload(sealed), control: true, readers: [\.owner, \.admin])
        #expect(events.allSatisfy { if case .diverged = $0 { true } else { false } }, "\(events)")
        #expect(s.owner.record.state.profile.name == "Hikers")
        #expect(s.admin.record.divergence != nil)
    }

    // MARK: Store errors

    struct LookupFailed: Error {}

    @Test func aKeyLookupThatThrowsStopsProcessingInsteadOfSkipping() throws {
        let s = try S()
        let processor = GroupLogProcessor(identity: s.admin.identity, codecs: .standard)
        let message = T.envelope(try s.admin.message("hello"), seq: 5)
        var commitEnvelope = T.envelope(try s.admin.sealedEntry(s.admin.commit(T.updateProfile("x"))), seq: 5)
        commitEnvelope.control = true
        for envelope in [message, commitEnvelope] {
            #expect(throws: LookupFailed.self) {
                try processor.process(
                    envelope, record: s.admin.record, key: { _ in throw LookupFailed() },
                    receivedAt: GroupClientSim.receivedAt)
            }
        }
        // With the store back, the same entries are processed.
        let keys = s.admin.keys
        let result = try processor.process(
            message, record: s.admin.record, key: { keys[$0] }, receivedAt: GroupClientSim.receivedAt)
        #expect(result.event.message?.displayText == "hello")
    }

    // MARK: Sender names

    @Test func aGroupMessageShowsTheSendersNameFromTheMemberRecordNotFromItsBundle() throws {
        var s = try S()
        let bea = s.member.identity
        let renamed = try Identity(
            signingKeyBytes: bea.signingKey.rawRepresentation, agreementKeyBytes: bea.agreementKey.rawRepresentation,
            displayName: "Alice", createdAt: T.created)
        let events = try s.publish(payload: s.member.message("it's me", from: renamed))
        for event in events {
            let message = try #require(event.message, "\(event)")
            #expect(message.sender == bea.inboxID)
            #expect(message.senderName == "Bea")
        }
    }
}
