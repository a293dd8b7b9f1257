import Foundation
import RallyWire

/// What one read of a whole batch said about one of its publishes, all
/// from one snapshot taken under the batch's topic locks.
struct AppendReading: Sendable, Equatable {
    /// The envelope stored earlier with the publish's topic and
    /// idempotency key, if any.
    var duplicate: WireEnvelope?
    var head: AppendRules.Head
    /// What the topic's keys say about the publish's access key (ignored
    /// for a publish without one).
    var keyStatus: AccessKeyStatus
}

/// A batch's outcome decided in memory from one read, so a store that
/// pays a round trip per statement (PostgreSQL) appends the whole batch in
/// two: one read, one write. It gives the answers appending the publishes
/// one after another would give, each seeing the ones before it: heads
/// advance within the batch, and a retry of a publish earlier in the same
/// batch is a duplicate of it.
///
/// A batch in which a key is founded or rotated is not planned (``plan``
/// returns nil): those change what the topic's keys say about the
/// publishes after them, and the store appends such a batch one publish
/// at a time. Both happen once in a topic's life or at a removal.
struct BatchAppendPlan: Sendable, Equatable {
    struct Insert: Sendable, Equatable {
        /// The publish's position in the batch.
        let index: Int
        let seq: Int64
    }

    /// One per publish, in batch order.
    var results: [Result<AppendResult, AppendRefusal>] = []
    /// The new envelopes, in batch order.
    var inserts: [Insert] = []
    /// The final head of every topic the batch writes to.
    var heads: [String: AppendRules.Head] = [:]

    private struct StoredKey: Hashable {
        let topic: String
        let key: Data
    }

    /// `readings[i]` is what the read said about `batch[i]`.
    static func plan(
        _ batch: [PublishRequest], readings: [AppendReading], serverTime: Int64
    ) -> BatchAppendPlan? {
        precondition(batch.count == readings.count, "one reading per publish")
        guard !batch.contains(where: rotates) else { return nil }
        var plan = BatchAppendPlan()
        plan.results.reserveCapacity(batch.count)
        var storedHere: [StoredKey: WireEnvelope] = [:]
        for (index, (request, reading)) in zip(batch, readings).enumerated() {
            let keyStatus = request.accessKey == nil ? nil : reading.keyStatus
            let storedKey =
                request.idempotencyKey.isEmpty
                ? nil : StoredKey(topic: request.topic, key: request.idempotencyKey)
            if let original = storedKey.flatMap({ storedHere[$0] }) ?? reading.duplicate {
                plan.results.append(AppendRules.retry(of: original, keyStatus: keyStatus))
                continue
            }
            let head = plan.heads[request.topic] ?? reading.head
            switch AppendRules.check(request, head: head, keyStatus: keyStatus) {
            case .failure(let refusal):
                plan.results.append(.failure(refusal))
            case .success(let founds):
                if founds { return nil }
                let seq = head.lastSeq + 1
                plan.heads[request.topic] = AppendRules.Head(
                    lastSeq: seq, lastControlSeq: request.control ? seq : head.lastControlSeq,
                    bytes: head.bytes + Int64(request.payload.count))
                plan.inserts.append(Insert(index: index, seq: seq))
                let envelope = AppendRules.envelope(request, seq: seq, serverTime: serverTime)
                if let storedKey { storedHere[storedKey] = envelope }
                plan.results.append(.success(AppendResult(envelope: envelope, duplicate: false)))
            }
        }
        return plan
    }

    /// Whether storing `request` may replace its topic's key.
    private static func rotates(_ request: PublishRequest) -> Bool {
        request.control && request.rotateAccessKey != nil
    }
}
