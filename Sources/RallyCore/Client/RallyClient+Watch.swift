import Crypto
import Foundation
import RallyCrypto

/// What `watch` reports.
public enum WatchEvent: Sendable {
    case inbox(RallyClient.InboxEvent)
    case group(groupID: String, GroupLogEvent)
    case joinRequest(JoinRequestReport)
    /// The set of followed groups and invite inboxes changed.
    case following(groups: [String], inviteInboxes: [String])
}

extension RallyClient {
    /// How often `watch` looks in the local store for groups and invite
    /// keys that appeared without passing through it (another process on
    /// the same home, e.g. `rally invite create` while `rally watch` runs).
    public static let watchRescanInterval: Duration = .seconds(2)

    /// Pause before restarting a failed follower: doubling from half a
    /// second, at most 30 s.
    static func watchRestartDelay(after failures: Int) -> Duration {
        .milliseconds(min(30_000, 500 << min(failures - 1, 6)))
    }

    /// Keeps this client online: follows the inbox, every active group's
    /// log and the invite inbox of every group it administers, answering
    /// join requests as they arrive, until cancelled or a follower fails
    /// for good. Groups joined or set up for invites while watching are
    /// picked up.
    public func watch(handler: @escaping @Sendable (WatchEvent) async -> Void) async throws(RallyClientError) {
        let (changes, signal) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let failure = FirstFailure()
        let logger = self.logger
        /// Runs a follower. Followers reconnect by themselves; one that
        /// still fails on a relay problem (say, mid-answer while the relay
        /// restarts) starts again after a pause. Anything else ends the
        /// watch, loudly.
        @Sendable func guarded(_ body: @Sendable () async throws(RallyClientError) -> Void) async {
            var failures = 0
            while !Task.isCancelled {
                do throws(RallyClientError) {
                    try await body()
                    return
                } catch .relay(let error) where error.isTransient {
                    failures += 1
                    logger.warning("watch: a follower stopped (\(error)); starting it again")
                    try? await Task.sleep(for: Self.watchRestartDelay(after: failures))
                } catch {
                    await failure.record(error)
                    signal.finish()
                    return
                }
            }
        }
        await withTaskGroup(of: Void.self) { tasks in
            tasks.addTask {
                await guarded { () throws(RallyClientError) in
                    try await self.followInbox(untilCaughtUp: false) { event in
                        await handler(.inbox(event))
                        if case .message = event { signal.yield() }
                    }
                }
            }
            tasks.addTask {
                while !Task.isCancelled {
                    try? await Task.sleep(for: Self.watchRescanInterval)
                    signal.yield()
                }
            }
            var groups: Set<String> = []
            var inviteInboxes: Set<String> = []
            signal.yield()
            for await _ in changes {
                let active: [GroupRecord]
                let seeds: [(groupID: String, seed: SymmetricKey)]
                do {
                    active = try store.groups().filter { $0.status == .active }
                    seeds = try store.inviteSeeds()
                } catch let error as LocalStoreError {
                    await failure.record(.store(error))
                    break
                } catch {
                    await failure.record(.store(.failed("\(error)")))
                    break
                }
                var changed = false
                for record in active where !groups.contains(record.groupID) {
                    groups.insert(record.groupID)
                    changed = true
                    let groupID = record.groupID
                    tasks.addTask {
                        await guarded { () throws(RallyClientError) in
                            try await self.followGroup(groupID, untilCaughtUp: false) { event in
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
                            try await self.followJoinRequests(groupID: groupID, seed: seed, untilCaughtUp: false) {
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
