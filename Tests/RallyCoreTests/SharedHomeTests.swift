import Crypto
import Foundation
import RallyCrypto
import RallyWire
import Testing

@testable import RallyCore

/// Several stores (connections) on one home, as several processes have:
/// SQLite's locking is the same between two connections of one process as
/// between two processes.
@Suite("Several stores on one home")
struct SharedHomeTests {
    let topic = try! TopicName(validating: "inbox/mzuhvlpymk6xo3epygfy5h4oeaejofef")

    @Test("Two stores ingesting the same envelopes at once store each message once and end at the last seq")
    func concurrentIngestIsIdempotent() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let stores = [try temp.openStore(), try temp.openStore(), try temp.openStore()]
        let messages = (1...150).map { Fixtures.message(text: "m\($0)", seq: UInt64($0)) }
        let failures = FailureLog()
        DispatchQueue.concurrentPerform(iterations: stores.count) { index in
            let store = stores[index]
            for message in messages {
                do {
                    try store.ingest(topic: topic, seq: message.seq!, message: message, now: Fixtures.created)
                } catch {
                    failures.add("\(error)")
                }
            }
        }
        #expect(failures.all.isEmpty)
        for store in stores {
            #expect(try store.cursor(for: topic) == 150)
            #expect(try store.messages().map(\.displayText) == messages.map(\.displayText))
        }
    }

    @Test("Concurrent writers of every kind never meet 'database is locked'")
    func concurrentWritersWait() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let stores = (0..<4).map { _ in try! temp.openStore() }
        let failures = FailureLog()
        DispatchQueue.concurrentPerform(iterations: stores.count) { index in
            let store = stores[index]
            do {
                for step in 1...60 {
                    let own = try TopicName(validating: "group/writer\(index)")
                    try store.ingest(topic: own, seq: UInt64(step), message: nil, now: Fixtures.created)
                    try store.saveOutgoing(Fixtures.message(conversation: "c\(index)", seq: nil))
                    try store.secrets.setSecret(Data([UInt8(step)]), named: .topicAccess("writer\(index)"))
                    _ = try store.messages(conversation: "c\(index)")
                }
            } catch {
                failures.add("\(error)")
            }
        }
        #expect(failures.all.isEmpty)
        #expect(try stores[0].messageCount() == 4 * 60)
    }

    @Test("A cursor never moves back when two stores advance it in either order")
    func cursorsOnlyMoveForward() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let first = try temp.openStore()
        let second = try temp.openStore()
        try first.ingest(topic: topic, seq: 10, message: nil, now: Fixtures.created)
        try second.ingest(topic: topic, seq: 5, message: Fixtures.message(text: "late", seq: 5), now: Fixtures.created)
        #expect(try first.cursor(for: topic) == 10)
        #expect(try second.cursor(for: topic) == 10)
        // An envelope another store already passed is not stored again.
        #expect(try first.messages().isEmpty)
    }

    @Test("A group entry another store already ingested does not overwrite the newer state")
    func groupStateNeverGoesBack() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let first = try temp.openStore()
        let second = try temp.openStore()
        let groupID = "00112233445566778899aabbccddeeff"
        var record = GroupRecord(
            groupID: groupID, topicID: String(repeating: "5a", count: 32), state: GroupState(groupID: groupID),
            status: .creating)
        try first.saveNewGroup(record, epochKey: nil, cursor: 0, now: Fixtures.created)
        record.status = .active
        #expect(try first.ingestGroupEntry(record, seq: 4, epochKey: nil, message: nil) == false)
        #expect(try first.group(groupID)?.status == .active)
        // The second store computed seq 3 from older state: too late.
        var stale = record
        stale.status = .removed
        let late = Fixtures.message(conversation: groupID, text: "late", seq: 3)
        #expect(try second.ingestGroupEntry(stale, seq: 3, epochKey: nil, message: late) == false)
        #expect(try second.group(groupID)?.status == .active)
        #expect(try second.cursor(for: record.topic) == 4)
        #expect(try second.messages(conversation: groupID).isEmpty)
    }

    @Test("A group message is stored under the sender's name in the group's member record")
    func groupMessagesTakeTheMemberRecordName() throws {
        let owner = Identity(displayName: "Bob")
        var state = GroupState(groupID: GroupTest.groupID)
        let create = GroupTest.commit(GroupTest.create("Picnic"), by: owner, on: state)
        _ = state.apply(try GroupTest.verified(create, by: owner))
        #expect(state.members[owner.inboxID] != nil)
        let claimed = StoredMessage(
            id: "01", conversation: state.groupID, outgoing: false, sender: owner.inboxID, senderName: "Alice",
            sentAt: Date(), receivedAt: Date(), topic: "group/x", seq: 2, contentType: "xmtp.org/text:1.0",
            encodedContent: Data(), displayText: "hi", isKnownType: true)
        #expect(claimed.namedByMemberRecord(in: state).senderName == "Bob")
        let stranger = claimed.withSenderName("Mallory")
        #expect(
            stranger.namedByMemberRecord(in: GroupState(groupID: state.groupID)).senderName == "Mallory")
    }
}

/// Errors collected from several threads.
final class FailureLog: @unchecked Sendable {
    // Every access holds the lock.
    private let lock = NSLock()
    private var failures: [String] = []

    func add(_ failure: String) { lock.withLock { failures.append(failure) } }
    var all: [String] { lock.withLock { failures } }
}
