import Foundation
import RallyWire
import Synchronization

/// What became of one queued publish after a flush.
enum OutboxDelivery: Sendable, Equatable {
    case sent(seq: UInt64)
    /// Still queued: the relay could not be reached (the reason says why).
    case queued(reason: String)
    /// Refused for good (by the relay, or by the group's rules).
    case failed(RallyClientError)
}

/// Sends the home's queued publishes, oldest first, one flush at a time
/// per process. Another process on the same home may flush at the same
/// time: both send in queue order with the same idempotency keys, so the
/// relay stores each once and the order per topic holds.
struct OutboxService: Sendable {
    let context: ClientContext
    let gate: FlushGate
    let routes: OutboxRoutes

    /// Flushes the queue, topics side by side: a topic stops at its first
    /// transient failure (the rest of it waits its turn, keeping the order),
    /// what the relay refuses for good is marked. Returns what happened to
    /// each item it reached.
    @discardableResult
    func flush() async throws(RallyClientError) -> [String: OutboxDelivery] {
        let context = self.context
        let result = await gate.serially { () async -> Result<[String: OutboxDelivery], RallyClientError> in
            do throws(RallyClientError) {
                return .success(try await self.sendQueued(context))
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    /// Most topics one flush sends to at once. Publishes to different
    /// topics need no order between them, and the relay makes one fsync
    /// serve every publish that waits for it, so sending them side by side
    /// takes about the time of one (a round of welcomes, say).
    static let concurrentTopics = 64

    /// Sends the queue one lane per topic, each lane in queue order, up to
    /// ``concurrentTopics`` lanes at a time.
    private func sendQueued(_ context: ClientContext) async throws(RallyClientError) -> [String: OutboxDelivery] {
        let queued = try context.stored { () throws(LocalStoreError) in try context.store.queuedOutgoing() }
        // What the relay acknowledged is recorded in one transaction when
        // the flush ends, however it ends: an item sent but not recorded
        // (a crash in between) is sent again by the next flush under the
        // same idempotency key, and the relay stores it once.
        let sent = SentItems()
        defer { sent.record(in: context) }
        var lanes: [[OutboxRecord]] = []
        var laneOfTopic: [String: Int] = [:]
        for item in queued {
            if let lane = laneOfTopic[item.topic] {
                lanes[lane].append(item)
            } else {
                laneOfTopic[item.topic] = lanes.count
                lanes.append([item])
            }
        }
        if lanes.count <= 1 { return try await sendLane(lanes.first ?? [], context, acknowledged: sent) }
        let results = await withTaskGroup(of: Result<[String: OutboxDelivery], RallyClientError>.self) { group in
            var next = 0
            func start() {
                let lane = lanes[next]
                next += 1
                group.addTask {
                    do throws(RallyClientError) {
                        return .success(try await self.sendLane(lane, context, acknowledged: sent))
                    } catch {
                        return .failure(error)
                    }
                }
            }
            while next < min(lanes.count, Self.concurrentTopics) { start() }
            var results: [Result<[String: OutboxDelivery], RallyClientError>] = []
            for await result in group {
                results.append(result)
                if next < lanes.count { start() }
            }
            return results
        }
        var outcomes: [String: OutboxDelivery] = [:]
        for result in results { outcomes.merge(try result.get()) { first, _ in first } }
        return outcomes
    }

    /// Sends one topic's items in order; stops at the first transient
    /// failure (the rest of the topic waits its turn, keeping the order),
    /// marks what the relay refuses for good.
    private func sendLane(
        _ queued: [OutboxRecord], _ context: ClientContext, acknowledged: SentItems
    ) async throws(RallyClientError) -> [String: OutboxDelivery] {
        var outcomes: [String: OutboxDelivery] = [:]
        for item in queued {
            guard let topic = try? TopicName(validating: item.topic) else {
                try context.stored { () throws(LocalStoreError) in
                    try context.store.outgoingFailed(item, reason: "not a topic name: \(item.topic)")
                }
                continue
            }
            let sent: Result<WirePublishAck, RallyClientError>
            if let groupID = item.groupID {
                sent = await sendGroupItem(item, groupID: groupID)
            } else {
                do throws(RelayClientError) {
                    sent = .success(try await Self.publish(item, to: topic, context))
                } catch {
                    sent = .failure(.relay(error))
                }
            }
            switch sent {
            case .success(let ack):
                acknowledged.note(item, seq: ack.seq)
                outcomes[item.messageID] = .sent(seq: ack.seq)
            case .failure(.relay(let error)) where error.isTransient:
                // The rest waits its turn, so the order per topic holds.
                try context.stored { () throws(LocalStoreError) in
                    try context.store.outgoingDeferred(item, reason: error.description)
                }
                outcomes[item.messageID] = .queued(reason: error.description)
                return outcomes
            case .failure(let error):
                try context.stored { () throws(LocalStoreError) in
                    try context.store.outgoingFailed(item, reason: error.description)
                }
                outcomes[item.messageID] = .failed(error)
            }
        }
        return outcomes
    }

    /// A queued group message, sealed and sent now by the group route
    /// (under the group's epoch and transcript at this moment).
    private func sendGroupItem(_ item: OutboxRecord, groupID: String) async -> Result<WirePublishAck, RallyClientError>
    {
        guard let send = routes.groups else {
            return .failure(.relay(.disconnected("no group route in this process yet")))
        }
        do throws(RallyClientError) {
            return .success(try await send(item, groupID))
        } catch {
            return .failure(error)
        }
    }

    /// One publish on the shared link, retried on transient failures (a
    /// new link after a dropped one) with the context's backoff, like any
    /// idempotent request; past the last attempt the item waits in the
    /// queue for the next flush.
    private static func publish(
        _ item: OutboxRecord, to topic: TopicName, _ context: ClientContext
    ) async throws(RelayClientError) -> WirePublishAck {
        var attempt = 0
        while true {
            attempt += 1
            do throws(RelayClientError) {
                let link = try await context.links.connected()
                do throws(RelayClientError) {
                    return try await link.publish(
                        topic: topic, payload: item.payload, idempotencyKey: item.idempotencyKey,
                        shouldPush: item.shouldPush)
                } catch {
                    if error.isTransient, error.code == nil { await context.links.disconnect() }
                    throw error
                }
            } catch {
                guard error.isTransient, attempt < ClientContext.requestAttempts else { throw error }
                context.logger.info("retrying the publish of \(item.messageID) after: \(error)")
                await context.pause(attempt)
            }
        }
    }

    func counts() throws(RallyClientError) -> OutboxCounts {
        try context.stored { () throws(LocalStoreError) in try context.store.outboxCounts() }
    }

    func failures() throws(RallyClientError) -> [OutgoingFailure] {
        try context.stored { () throws(LocalStoreError) in try context.store.failedOutgoing() }
    }
}

/// The items one flush's lanes had acknowledged, recorded together once
/// the flush ends.
private final class SentItems: Sendable {
    private let items = Mutex<[(item: OutboxRecord, seq: UInt64)]>([])

    func note(_ item: OutboxRecord, seq: UInt64) { items.withLock { $0.append((item, seq)) } }

    func record(in context: ClientContext) {
        let sent = items.withLock { $0 }
        guard !sent.isEmpty else { return }
        do {
            try context.store.outgoingSent(sent)
        } catch {
            context.logger.warning("could not record \(sent.count) sent messages: \(error)")
        }
    }
}

/// Where queued items that are not sealed yet go to be sent: set once by
/// the client that owns the services (group messages need the group
/// service, which is built on the context).
///
/// `@unchecked Sendable`: `groups` is written and read only while `lock` is
/// held.
final class OutboxRoutes: @unchecked Sendable {
    typealias GroupSender = @Sendable (OutboxRecord, String) async throws(RallyClientError) -> WirePublishAck
    private let lock = NSLock()
    private var groupSender: GroupSender?

    var groups: GroupSender? { lock.withLock { groupSender } }

    func route(groups sender: @escaping GroupSender) {
        lock.withLock { groupSender = sender }
    }
}

/// Runs flushes one after another within a process.
actor FlushGate {
    private var tail: Task<Void, Never>?

    func serially<T: Sendable>(_ body: @escaping @Sendable () async -> T) async -> T {
        let previous = tail
        let task = Task<T, Never> {
            await previous?.value
            return await body()
        }
        tail = Task { _ = await task.value }
        return await task.value
    }
}
