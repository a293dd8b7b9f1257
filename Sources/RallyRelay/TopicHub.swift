import Foundation
import NIOCore
import RallyWire
import Synchronization

/// Live fan-out of committed envelopes to the subscribers of each topic.
///
/// Delivery never waits for a subscriber: each has a bounded buffer, and a
/// subscriber whose buffer is full is cut off (its stream finishes with
/// `.overflowed`). The store holds everything, so a cut-off subscriber loses
/// nothing: it resubscribes from its cursor.
///
/// A lock, not an actor: a commit on a socket's event loop hands its
/// envelopes over without leaving the loop (ADR 0028). Nothing under the
/// lock waits: a yield into a bounded stream returns at once.
final class TopicHub: Sendable {
    /// A committed envelope and, for a key rotation, the key it retired.
    struct Item: Sendable, Equatable {
        let envelope: WireEnvelope
        var retiredKey: Data? = nil
        /// The envelope's WebSocket frame, encoded once by the hub for all
        /// of the topic's subscribers (a group's members share one encoding).
        var frame: ByteBuffer? = nil
    }

    struct Subscription: Sendable {
        let id: UInt64
        let topic: String
        let items: AsyncStream<Item>
    }

    enum EndReason: Sendable, Equatable {
        case overflowed
        case shutDown
        case unsubscribed
    }

    private struct Entry {
        let continuation: AsyncStream<Item>.Continuation
        /// Writes the subscriber's next envelope itself when it may.
        let live: LiveDelivery?
    }

    private struct State {
        /// The subscribers of each topic, held by topic: a delivery looks
        /// its topic up once and then only walks them.
        var byTopic: [String: [UInt64: Entry]] = [:]
        /// Each live subscription's topic.
        var topicOf: [UInt64: String] = [:]
        var endedReasons: [UInt64: EndReason] = [:]
        var nextID: UInt64 = 1
        var isShutDown = false

        mutating func end(_ id: UInt64, reason: EndReason) {
            guard let entry = remove(id) else { return }
            endedReasons[id] = reason
            entry.continuation.finish()
        }

        mutating func remove(_ id: UInt64) -> Entry? {
            guard let topic = topicOf.removeValue(forKey: id) else { return nil }
            let entry = byTopic[topic]?.removeValue(forKey: id)
            if byTopic[topic]?.isEmpty == true { byTopic[topic] = nil }
            return entry
        }
    }

    private let state = Mutex(State())

    /// Starts buffering live envelopes of `topic` for a new subscriber;
    /// with `live`, the hub offers each envelope to it first.
    func subscribe(topic: String, capacity: Int, live: LiveDelivery? = nil) -> Subscription {
        let (stream, continuation) = AsyncStream<Item>.makeStream(
            bufferingPolicy: .bufferingOldest(max(1, capacity)))
        let id = state.withLock { state in
            let id = state.nextID
            state.nextID += 1
            if state.isShutDown {
                continuation.finish()
                state.endedReasons[id] = .shutDown
            } else {
                state.topicOf[id] = topic
                state.byTopic[topic, default: [:]][id] = Entry(continuation: continuation, live: live)
            }
            return id
        }
        return Subscription(id: id, topic: topic, items: stream)
    }

    /// Removes a subscriber and returns why its stream ended, if it did.
    @discardableResult
    func unsubscribe(_ id: UInt64) -> EndReason? {
        state.withLock { state in
            if let ended = state.endedReasons.removeValue(forKey: id) { return ended }
            state.remove(id)?.continuation.finish()
            return nil
        }
    }

    /// Why a subscriber's stream finished, or nil if it is still live.
    func endReason(_ id: UInt64) -> EndReason? {
        state.withLock { $0.endedReasons[id] }
    }

    /// Offers committed envelopes, in commit order, to every subscriber of
    /// their topics. Returns how many deliveries were made.
    @discardableResult
    func deliver(_ envelopes: [WireEnvelope]) -> Int {
        deliver(items: envelopes.map { Item(envelope: $0) })
    }

    /// One lock for the whole batch, and one lookup of each item's topic.
    /// The frame is encoded under the lock, only for a topic someone
    /// follows: what else takes the lock (subscribing, unsubscribing)
    /// waits for a batch of encodings, not for a subscriber.
    @discardableResult
    func deliver(items: [Item]) -> Int {
        state.withLock { state in
            var delivered = 0
            for var item in items {
                guard let subscribers = state.byTopic[item.envelope.topic] else { continue }
                item.frame = Self.encodedFrame(item.envelope)
                for (id, entry) in subscribers {
                    if let live = entry.live, live.offer(item) {
                        delivered += 1
                        continue
                    }
                    switch entry.continuation.yield(item) {
                    case .enqueued:
                        delivered += 1
                    case .dropped:
                        state.end(id, reason: .overflowed)
                    case .terminated:
                        state.end(id, reason: .unsubscribed)
                    @unknown default:
                        state.end(id, reason: .overflowed)
                    }
                }
            }
            return delivered
        }
    }

    /// A live envelope as the WebSocket frame every subscriber receives.
    static func encodedFrame(_ envelope: WireEnvelope) -> ByteBuffer {
        HotFrameEncoding.envelope(envelope)
    }

    /// Ends every subscription; later subscriptions end at once.
    func shutdown() {
        state.withLock { state in
            state.isShutDown = true
            for id in Array(state.topicOf.keys) { state.end(id, reason: .shutDown) }
        }
    }

    /// The topics with a subscriber on this node.
    func followedTopics() -> [String] { state.withLock { Array($0.byTopic.keys) } }

    func subscriberCount(topic: String) -> Int {
        state.withLock { $0.byTopic[topic]?.count ?? 0 }
    }
}
