import Foundation
import Logging
import PostgresNIO
import RallyWire

/// How a node hears of envelopes other nodes stored (ADR 0021): it listens
/// on the shared database's channel and, for a topic someone follows here,
/// reads the announced envelope from the store and hands it to this node's
/// hub. A subscription that then sees a seq past the next one it expects
/// reads the gap from the store (``SubscriptionFeed``), so an announcement
/// that comes late, or not at all while the listener reconnects, loses
/// nothing.
struct PostgresLiveFeed: Sendable {
    let store: PostgresRelayStore
    let services: RelayServices

    static let reconnectPause: Duration = .seconds(1)

    func run() async {
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
                            await announced(notification.payload)
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

    /// `<node> <seq> <topic>`: another node stored `seq` on `topic`;
    /// `<node> push+ <inbox>` / `push- <inbox>`: it registered or removed
    /// that inbox's push target.
    func announced(_ payload: String) async {
        let parts = payload.split(separator: " ", maxSplits: 2)
        guard parts.count == 3, parts[0] != Substring(store.nodeID) else { return }
        switch parts[1] {
        case "push+": return await services.push.noteRegistered(inbox: String(parts[2]))
        case "push-": return await services.push.noteUnregistered(inbox: String(parts[2]))
        default: break
        }
        guard let seq = UInt64(parts[1]), seq > 0 else { return }
        let topic = String(parts[2])
        guard await services.hub.subscriberCount(topic: topic) > 0 else { return }
        await deliver(topic: topic, after: seq - 1)
    }

    private func deliver(topic: String, after: UInt64) async {
        do {
            let page = try await services.store.fetch(
                topic: topic, after: after, limit: 1, maxBytes: 0, nowMilliseconds: services.clock.nowMilliseconds)
            await services.hub.deliver(
                items: page.envelopes.map { TopicHub.Item(envelope: $0, retiredKey: page.retiredKeys[$0.seq]) })
        } catch {
            services.logger.error(
                "reading an envelope another node stored failed", metadata: ["topic": "\(topic)", "error": "\(error)"])
        }
    }

    /// Offers each followed topic's newest envelope: a subscription behind
    /// it reads up from the store.
    private func nudgeFollowedTopics() async {
        for topic in await services.hub.followedTopics() {
            guard let head = try? await services.store.headSeq(topic: topic), head > 0 else { continue }
            await deliver(topic: topic, after: head - 1)
        }
    }
}
