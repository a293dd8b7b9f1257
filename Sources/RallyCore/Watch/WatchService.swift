import Crypto
import Foundation
import RallyCrypto

/// What `watch` reports.
public enum WatchEvent: Sendable {
    case inbox(InboxEvent)
    case group(groupID: String, GroupLogEvent)
    case joinRequest(JoinRequestReport)
    /// The set of followed groups and invite inboxes changed.
    case following(groups: [String], inviteInboxes: [String])
}

/// Keeps a client online: follows the inbox, every active group's log and
/// the invite inbox of every group it administers, answering join
/// requests as they arrive.
struct WatchService: Sendable {
    /// How often `watch` looks in the local store for groups and invite
    /// keys that appeared without passing through it (another process on
    /// the same home, e.g. `rally invite create` while `rally watch` runs).
    static let rescanInterval: Duration = .seconds(2)

    let context: ClientContext
    let inbox: InboxService
    let log: GroupLog
    let desk: InviterDesk

    /// Runs until cancelled or a follower fails for good. Groups joined or
    /// set up for invites while watching are picked up.
    func watch(handler: @escaping @Sendable (WatchEvent) async -> Void) async throws(RallyClientError) {
        let (changes, signal) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let failure = FirstFailure()
        let context = self.context
        /// Runs a follower. Followers reconnect by themselves; one that
        /// still fails on a relay problem (say, mid-answer while the relay
        /// restarts) starts again after the backoff's pause. Anything else
        /// ends the watch, loudly.
        @Sendable func guarded(_ body: @Sendable () async throws(RallyClientError) -> Void) async {
            var failures = 0
            while !Task.isCancelled {
                do throws(RallyClientError) {
                    try await body()
                    return
                } catch {
                    guard case .relay(let relayError) = error, relayError.isTransient else {
                        await failure.record(error)
                        signal.finish()
                        return
                    }
                    failures += 1
                    context.logger.warning("watch: a follower stopped (\(relayError)); starting it again")
                    await context.pause(failures)
                }
            }
        }
        let inbox = self.inbox
        let log = self.log
        let desk = self.desk
        await withTaskGroup(of: Void.self) { tasks in
            tasks.addTask {
                await guarded { () throws(RallyClientError) in
                    try await inbox.follow(untilCaughtUp: false) { event in
                        await handler(.inbox(event))
                        if case .message = event { signal.yield() }
                    }
                }
            }
            tasks.addTask {
                while !Task.isCancelled {
                    try? await context.clock.sleep(Self.rescanInterval)
                    signal.yield()
                }
            }
            var groups: Set<String> = []
            var inviteInboxes: Set<String> = []
            signal.yield()
            for await _ in changes {
                let active: [String]
                let seeds: [(groupID: String, seed: SymmetricKey)]
                do throws(RallyClientError) {
                    active = try log.activeGroupIDs()
                    seeds = try desk.inviteSeeds()
                } catch {
                    await failure.record(error)
                    break
                }
                var changed = false
                for groupID in active where !groups.contains(groupID) {
                    groups.insert(groupID)
                    changed = true
                    tasks.addTask {
                        await guarded { () throws(RallyClientError) in
                            try await log.follow(groupID, untilCaughtUp: false) { event in
                                await handler(.group(groupID: groupID, event))
                                if case .commit = event { signal.yield() }
                            }
                        }
                    }
                }
                for (groupID, seed) in seeds where !inviteInboxes.contains(groupID) {
                    inviteInboxes.insert(groupID)
                    changed = true
                    tasks.addTask {
                        await guarded { () throws(RallyClientError) in
                            try await desk.followJoinRequests(groupID: groupID, seed: seed, untilCaughtUp: false) {
                                report in await handler(.joinRequest(report))
                            }
                        }
                    }
                }
                if changed {
                    await handler(.following(groups: groups.sorted(), inviteInboxes: inviteInboxes.sorted()))
                }
            }
            tasks.cancelAll()
        }
        if let error = await failure.error { throw error }
    }
}

private actor FirstFailure {
    var error: RallyClientError?
    func record(_ error: RallyClientError) {
        if self.error == nil { self.error = error }
    }
}
