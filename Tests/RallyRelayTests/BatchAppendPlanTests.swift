import Foundation
import RallyWire
import Testing

@testable import RallyRelay

/// The in-memory plan of a batch (PostgreSQL's two-round-trip append): the
/// answers one-at-a-time appending would give, from one read.
@Suite("Batch append plan")
struct BatchAppendPlanTests {
    static let key = Data(repeating: 1, count: 32)

    static func publish(
        _ topic: String, _ payload: String, idempotency: String = "", control: Bool = false, expected: UInt64 = 0,
        rotate: Data? = nil
    ) -> PublishRequest {
        PublishRequest(
            topic: topic, payload: Data(payload.utf8), idempotencyKey: Data(idempotency.utf8), accessKey: key,
            control: control, expectedControlSeq: expected, rotateAccessKey: rotate)
    }

    static func reading(
        lastSeq: Int64, lastControlSeq: Int64 = 0, bytes: Int64 = 0, status: AccessKeyStatus = .current,
        duplicate: WireEnvelope? = nil
    ) -> AppendReading {
        AppendReading(
            duplicate: duplicate,
            head: AppendRules.Head(lastSeq: lastSeq, lastControlSeq: lastControlSeq, bytes: bytes),
            keyStatus: status)
    }

    @Test("heads advance per topic within the batch; a refusal takes no seq; the final heads are what is written")
    func headsAdvance() throws {
        let batch = [
            Self.publish("group/a", "1"), Self.publish("group/b", "1"),
            Self.publish("group/a", "commit", control: true, expected: 0),
            Self.publish("group/a", "stale", control: true, expected: 0), Self.publish("group/a", "3"),
        ]
        let readings = [
            Self.reading(lastSeq: 7, bytes: 100), Self.reading(lastSeq: 2), Self.reading(lastSeq: 7, bytes: 100),
            Self.reading(lastSeq: 7, bytes: 100), Self.reading(lastSeq: 7, bytes: 100),
        ]
        let plan = try #require(BatchAppendPlan.plan(batch, readings: readings, serverTime: 5))
        #expect(plan.results.map { (try? $0.get())?.envelope.seq } == [8, 3, 9, nil, 10])
        #expect(plan.results[3] == .failure(.conflict(lastControlSeq: 9)))
        #expect(
            plan.inserts == [
                .init(index: 0, seq: 8), .init(index: 1, seq: 3), .init(index: 2, seq: 9), .init(index: 4, seq: 10),
            ])
        #expect(plan.heads["group/a"] == AppendRules.Head(lastSeq: 10, lastControlSeq: 9, bytes: 108))
        #expect(plan.heads["group/b"] == AppendRules.Head(lastSeq: 3, lastControlSeq: 0, bytes: 1))
    }

    @Test("a retry is answered with the stored envelope: from the read, or from earlier in the same batch")
    func retries() throws {
        var stored = WireEnvelope()
        stored.topic = "group/a"
        stored.seq = 4
        let batch = [
            Self.publish("group/a", "old", idempotency: "k1"), Self.publish("group/a", "new", idempotency: "k2"),
            Self.publish("group/a", "new", idempotency: "k2"), Self.publish("group/b", "new", idempotency: "k2"),
        ]
        let readings = [
            Self.reading(lastSeq: 5, duplicate: stored), Self.reading(lastSeq: 5), Self.reading(lastSeq: 5),
            Self.reading(lastSeq: 0),
        ]
        let plan = try #require(BatchAppendPlan.plan(batch, readings: readings, serverTime: 5))
        let results = try plan.results.map { try $0.get() }
        #expect(results.map(\.duplicate) == [true, false, true, false])
        #expect(results.map(\.envelope.seq) == [4, 6, 6, 1])
        #expect(results[2].envelope == results[1].envelope)
        #expect(plan.inserts.map(\.index) == [1, 3])
    }

    @Test("a batch that founds or rotates a key is not planned: the store appends it one publish at a time")
    func foundingAndRotationFallBack() {
        let founding = BatchAppendPlan.plan(
            [Self.publish("group/a", "1"), Self.publish("group/x", "found")],
            readings: [Self.reading(lastSeq: 1), Self.reading(lastSeq: 0, status: .unregistered)], serverTime: 1)
        // The key founds only a topic whose id it derives, so with this key
        // an unregistered topic is refused, and the batch is planned.
        #expect(
            founding?.results.last
                == .failure(.forbidden("the topic does not exist and this key does not found its id")))
        let access = testAccess(21)
        var founds = Self.publish("group/" + access.foundedTopicID, "found")
        founds.accessKey = access.publicKey
        #expect(
            BatchAppendPlan.plan(
                [Self.publish("group/a", "1"), founds],
                readings: [Self.reading(lastSeq: 1), Self.reading(lastSeq: 0, status: .unregistered)], serverTime: 1)
                == nil)
        let rotation = Self.publish(
            "group/a", "rotate", control: true, expected: 0, rotate: Data(repeating: 2, count: 32))
        #expect(BatchAppendPlan.plan([rotation], readings: [Self.reading(lastSeq: 1)], serverTime: 1) == nil)
    }
}
