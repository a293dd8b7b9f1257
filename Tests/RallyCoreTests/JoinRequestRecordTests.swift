import Foundation
import GRDB
import RallyCrypto
import RallyWire
import Testing

@testable import RallyCore

/// How an admin's client records a batch of answered join requests: in one
/// transaction with the invite inbox's cursor, read back for the next batch.
@Suite("Join request records")
struct JoinRequestRecordTests {
    let groupID = GroupTest.groupID
    let topic = try! TopicName.inbox(Identity(displayName: "invite").inboxID.rawValue)

    func inbox(_ name: String) -> InboxID { Identity(displayName: name).inboxID }

    @Test func aBatchIsRecordedWithTheCursorPastItsLastRequestAndReadBackAtOnce() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let store = try temp.openStore()
        let (alice, mallory, bob) = (inbox("alice"), inbox("mallory"), inbox("bob"))
        let batch = [
            FinishedJoinRequest(
                requestID: "aa01", joiner: alice, outcome: .admitted, detail: nil, block: false, seq: 4),
            FinishedJoinRequest(
                requestID: "aa02", joiner: mallory, outcome: .blocked, detail: "a forged invite", block: true, seq: 5),
            // An envelope that did not open: nothing to record but the cursor.
            FinishedJoinRequest(
                requestID: nil, joiner: nil, outcome: .ignored, detail: "bad seal", block: false, seq: 7),
            // A duplicate keeps the first handling's record.
            FinishedJoinRequest(requestID: nil, joiner: alice, outcome: .admitted, detail: nil, block: false, seq: 6),
        ]
        try store.finishJoinRequests(batch, groupID: groupID, topic: topic, now: Fixtures.created)

        #expect(try store.cursor(for: topic) == 7)
        let known = try store.joinRequestHistory(
            requestIDs: ["aa01", "aa02", "aa03"], senders: [alice, mallory, bob], group: groupID)
        #expect(known.seen == ["aa01", "aa02"])
        #expect(known.blocked == [mallory])
        #expect(
            try store.joinRequestHistory(requestIDs: [], senders: [mallory], group: "another group").blocked.isEmpty)
        #expect(try store.blockedJoinSenders(group: groupID).map(\.reason) == ["a forged invite"])
        let outcomes = try store.read { db in
            try JoinRequestSeenRecord.fetchAll(db).map { "\($0.requestID) \($0.outcome)" }.sorted()
        }
        #expect(outcomes == ["aa01 admitted", "aa02 blocked"])

        // A later batch that is all below the cursor (another process got
        // there first) records its requests and leaves the cursor alone.
        try store.finishJoinRequests(
            [
                FinishedJoinRequest(
                    requestID: "aa03", joiner: bob, outcome: .rejected, detail: nil, block: false, seq: 3)
            ],
            groupID: groupID, topic: topic, now: Fixtures.created)
        #expect(try store.cursor(for: topic) == 7)
        #expect(try store.joinRequestHistory(requestIDs: ["aa03"], senders: [], group: groupID).seen == ["aa03"])

        // Nothing to record changes nothing.
        try store.finishJoinRequests([], groupID: groupID, topic: topic, now: Fixtures.created)
        #expect(try store.cursor(for: topic) == 7)
    }
}

@Suite("Mapping on every core")
struct MapOnEveryCoreTests {
    @Test("keeps the elements' order below and above the threshold", arguments: [0, 1, 7, 8, 9, 100, 1001])
    func keepsOrder(count: Int) async {
        let input = (0..<count).map { $0 * 3 }
        let mapped = await input.mapOnEveryCore(threshold: 8) { "\($0 + 1)" }
        #expect(mapped == input.map { "\($0 + 1)" })
    }
}
