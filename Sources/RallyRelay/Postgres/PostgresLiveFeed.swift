import Foundation
import Logging
import PostgresNIO
import RallyWire
import Synchronization

/// How a node hears of envelopes other nodes stored (ADR 0021): it listens
/// on the shared database's channel and, for a topic someone follows here,
/// reads the announced envelope from the store and hands it to this node's
/// hub. A subscription that then sees a seq past the next one it expects
/// reads the gap from the store (``SubscriptionFeed``), so an announcement
/// that comes late, or not at all while the listener reconnects, loses
/// nothing.
///
/// Announcements are read in bursts: whatever arrived while the last burst
/// was handled is handled together, with one read of the store for all its
/// envelopes. One read per announcement capped a node at a few hundred
/// envelopes a second from the others, and past that their delivery fell
/// seconds behind.
struct PostgresLiveFeed: Sendable {
    let store: PostgresRelayStore
    let services: RelayServices

    static let reconnectPause: Duration = .seconds(1)

    func run() async {
        let queue = AnnouncementQueue()
        await withDiscardingTaskGroup { group in
            group.addTask {
                await queue.handleBursts { burst in await announced(burst) }
            }
            await listen(into: queue)
            queue.finish()
        }
    }

    private func listen(into queue: AnnouncementQueue) async {
        while !Task.isCancelled {
            do {
                try await store.client.withConnection { connection in
                    try await connection.listen(on: PostgresRelayStore.channel) { notifications in
                        // Heard from now on: what was announced while no one
                        // listened is offered again, and the push targets
                        // registered meanwhile are read again.
                        await services.push.reloadTargets()
                        await nudgeFollowedTopics()
                        for try await notification in notifications {
                            queue.add(notification.payload)
                        }
                    }
                }
            } catch is CancellationError {
                return
            } catch {
                if Task.isCancelled { return }
                services.logger.warning(
                    "listening for other relay nodes failed; listening again", metadata: ["error": "\(error)"])
            }
            try? await Task.sleep(for: Self.reconnectPause)
        }
    }

    /// A burst of announcements, in the order heard. `<node> <seq>
    /// <topic>`: another node stored `seq` on `topic`; `<node> push+
    /// <inbox>` / `push- <inbox>`: it registered or removed that inbox's
    /// push target.
    func announced(_ payloads: [String]) async {
        var stored: [AnnouncedEnvelope] = []
        var followed: [String: Bool] = [:]
        for payload in payloads {
            let parts = payload.split(separator: " ", maxSplits: 2)
            guard parts.count == 3, parts[0] != Substring(store.nodeID) else { continue }
            switch parts[1] {
            case "push+":
                await services.push.noteRegistered(inbox: String(parts[2]))
                continue
            case "push-":
                await services.push.noteUnregistered(inbox: String(parts[2]))
                continue
            default: break
            }
            guard let seq = UInt64(parts[1]), seq > 0 else { continue }
            let topic = String(parts[2])
            if followed[topic] == nil { followed[topic] = services.hub.subscriberCount(topic: topic) > 0 }
            if followed[topic] == true { stored.append(AnnouncedEnvelope(topic: topic, seq: seq)) }
        }
        await deliver(stored)
    }

    /// Reads the announced envelopes still stored, all in one query, and
    /// hands them to this node's hub.
    private func deliver(_ announced: [AnnouncedEnvelope]) async {
        guard !announced.isEmpty else { return }
        do {
            let items = try await store.announcedEnvelopes(announced, nowMilliseconds: services.clock.nowMilliseconds)
            services.hub.deliver(items: items)
        } catch {
            services.logger.error(
                "reading envelopes other nodes stored failed",
                metadata: ["envelopes": "\(announced.count)", "error": "\(error)"])
        }
    }

    /// Offers each followed topic's newest envelope: a subscription behind
    /// it reads up from the store.
    private func nudgeFollowedTopics() async {
        var newest: [AnnouncedEnvelope] = []
        for topic in services.hub.followedTopics() {
            guard let head = try? await services.store.headSeq(topic: topic), head > 0 else { continue }
            newest.append(AnnouncedEnvelope(topic: topic, seq: head))
        }
        await deliver(newest)
    }
}

/// An envelope another node announced: where to read it.
struct AnnouncedEnvelope: Hashable, Sendable {
    let topic: String
    let seq: UInt64
}

/// Announcements heard and not yet handled. The listener adds them as they
/// come; the handler takes all that wait at once, and waits when there are
/// none.
final class AnnouncementQueue: Sendable {
    private struct State {
        var waiting: [String] = []
        var finished = false
    }

    private let state = Mutex(State())
    /// At most one wake-up is pending: a burst is taken whole.
    private let wakeUps: AsyncStream<Void>
    private let wake: AsyncStream<Void>.Continuation

    init() {
        (wakeUps, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    func add(_ payload: String) {
        state.withLock { $0.waiting.append(payload) }
        wake.yield()
    }

    /// No more announcements: ``handleBursts(_:)`` hands on what waits,
    /// then returns.
    func finish() {
        state.withLock { $0.finished = true }
        wake.finish()
    }

    /// Hands on everything that waits, in the order added, as one burst
    /// at a time; returns once finished and empty, or cancelled (the node
    /// is stopping). One caller at a time.
    func handleBursts(_ handle: ([String]) async -> Void) async {
        var wakeUps = self.wakeUps.makeAsyncIterator()
        while !Task.isCancelled {
            let (burst, finished) = state.withLock { state in
                defer { state.waiting.removeAll(keepingCapacity: true) }
                return (state.waiting, state.finished)
            }
            if !burst.isEmpty {
                await handle(burst)
            } else if finished {
                return
            } else {
                _ = await wakeUps.next()
            }
        }
    }
}
