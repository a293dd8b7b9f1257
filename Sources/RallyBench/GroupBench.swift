import ArgumentParser
import Crypto
import Foundation
import Logging
import RallyCore
import RallyCrypto
import RallyWire

/// `rally-bench group`: fan-out latency of one group message to every
/// member for several group sizes, and the CPU cost of a removal (rekey)
/// against group size. Prints numbers; asserts nothing.
struct GroupBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "group", abstract: "Measure group message fan-out and removal (rekey) cost.")

    @Option(help: "Group sizes, comma-separated.") var sizes = "10,100,1000"
    @Option(help: "Messages timed per group size.") var messages = 5

    func run() async throws {
        let sizes = self.sizes.split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard !sizes.isEmpty, sizes.allSatisfy({ $0 >= 2 }) else { throw ValidationError("--sizes: e.g. 10,100,1000") }
        let relay = try ChildRelay.start()
        defer { relay.stop() }
        Output.write("relay: separate process pid \(relay.pid) on \(relay.url)")
        Output.write(
            "members  envelopes/msg  fan-out p50 ms  fan-out max ms  (time until every member decrypted and verified)")
        for size in sizes {
            let result = try await fanOut(members: size, relayURL: relay.url)
            Output.write(
                String(
                    format: "%7d  %13.1f  %14.2f  %14.2f", size, result.envelopesPerMessage, result.p50, result.max))
        }
        Output.write("members  build removal ms  apply removal ms (one member: verify, rules, open key)")
        for size in sizes {
            let (build, apply) = try removalCost(members: size)
            Output.write(String(format: "%7d  %16.2f  %16.3f", size, build, apply))
        }
        let lifecycle = try lifecycleCost(members: lifecycleMembers, batch: batch, commits: catchUpCommits)
        Output.write(
            "lifecycle in a \(lifecycleMembers)-member group (CPU only: build = draft, seal keys, sign; apply = verify, rules, state):"
        )
        Output.write(
            String(
                format: "  role change of %d members: build %.2f ms, apply %.2f ms", batch, lifecycle.rolesBuild,
                lifecycle.rolesApply))
        Output.write(
            String(
                format:
                    "  removal of %d members (fresh key sealed to %d): build %.2f ms, apply %.2f ms (with opening the key)",
                batch, lifecycleMembers - batch - 1, lifecycle.removalBuild, lifecycle.removalApply))
        Output.write(
            String(
                format: "  an offline member catching up through %d lifecycle commits: %.1f ms (%.3f ms per commit)",
                catchUpCommits, lifecycle.catchUp, lifecycle.catchUp / Double(catchUpCommits)))
        let overRelay = try await relayCatchUp(commits: catchUpCommits, relayURL: relay.url)
        Output.write(
            String(
                format:
                    "  the same through the relay with real clients (fetch, open, verify, apply, persist each): %.1f ms (%.3f ms per commit)",
                overRelay.catchUp, overRelay.catchUp / Double(catchUpCommits)))
        Output.write(
            String(
                format: "  then %d messages read by the same member in one sync: %.1f ms (%.3f ms per message)",
                Self.messagesAfterHistory, overRelay.messages,
                overRelay.messages / Double(Self.messagesAfterHistory)))
        Output.write("relay peak memory (VmHWM): \(relay.peakMemoryKiB().map { "\($0 / 1024) MiB" } ?? "unknown")")
    }

    /// An owner makes `commits` lifecycle commits (welcome message, a role,
    /// a preference, in turn) while a member's client is away; then times
    /// the member's one sync that catches up through all of them, with
    /// real homes and the relay. The two must agree on the state.
    private func relayCatchUp(commits: Int, relayURL: URL) async throws -> (catchUp: Double, messages: Double) {
        var logger = Logger(label: "rally.bench")
        logger.logLevel = .error
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("rally-bench-catch-up-\(UUID())")
        defer { try? FileManager.default.removeItem(at: root) }
        func client(_ name: String) async throws -> RallyClient {
            try await RallyClient.create(
                home: root.appendingPathComponent(name), relayURL: relayURL, displayName: name, logger: logger)
        }
        let owner = try await client("owner")
        let member = try await client("member")
        let groupID = try await owner.createGroup(name: "bench").groupID
        _ = try await owner.addMember(member.inboxID, to: groupID)
        _ = try await member.syncInbox()
        for index in 0..<commits {
            switch index % 3 {
            case 0: try await owner.setWelcomeMessage("welcome \(index)", in: groupID)
            case 1:
                _ = try await owner.changeRoles(
                    of: [member.inboxID], to: index % 2 == 0 ? .moderator : .member, in: groupID)
            default:
                _ = try await owner.setGroupPreferences(
                    [.reactions: GroupPreference(enabled: index % 2 == 0)], in: groupID)
            }
        }
        let clock = ContinuousClock()
        let start = clock.now
        try await member.syncGroup(groupID)
        let elapsed = Self.milliseconds(clock.now - start)
        guard try await member.group(groupID).state == owner.group(groupID).state else {
            throw ValidationError("the member did not converge")
        }
        // Messages after that history: each is read on a state whose
        // snapshot holds every applied commit id.
        for index in 0..<Self.messagesAfterHistory {
            _ = try await owner.sendGroupText("message \(index)", to: groupID)
        }
        let messagesStart = clock.now
        try await member.syncGroup(groupID)
        let messages = Self.milliseconds(clock.now - messagesStart)
        guard try await member.groupMessages(in: groupID).count >= Self.messagesAfterHistory else {
            throw ValidationError("the member did not read every message")
        }
        await owner.disconnect()
        await member.disconnect()
        return (elapsed, messages)
    }

    static let messagesAfterHistory = 200

    @Option(help: "Members of the group the lifecycle figures use.") var lifecycleMembers = 1000
    @Option(help: "Members one batch role change or removal names.") var batch = 100
    @Option(help: "Lifecycle commits an offline member catches up through.") var catchUpCommits = 1000

    struct LifecycleCost {
        var rolesBuild = 0.0
        var rolesApply = 0.0
        var removalBuild = 0.0
        var removalApply = 0.0
        var catchUp = 0.0
    }

    /// A group of `count` members built in memory; times a batch role
    /// change and a batch removal of `batch` members (build and apply),
    /// and applying `commits` lifecycle commits one after another, as a
    /// member who was offline does.
    private func lifecycleCost(members count: Int, batch: Int, commits: Int) throws -> LifecycleCost {
        guard count > batch + 1, batch >= 1, commits >= 1 else {
            throw ValidationError("--lifecycle-members must exceed --batch + 1")
        }
        let identities = (0..<count).map { Identity(displayName: "member-\($0)") }
        let owner = identities[0]
        var state = try Self.group(identities)
        let targets = identities[1...batch].map(\.inboxID.rawValue)
        let clock = ContinuousClock()
        var cost = LifecycleCost()

        var signed = WireSignedGroupCommit()
        cost.rolesBuild = Self.milliseconds(
            try clock.measure {
                var roles = Self.commit(on: state, author: owner)
                roles.changeRoles.inboxIds = targets
                roles.changeRoles.role = .moderator
                signed = try VerifiedGroupCommit.sign(roles, by: owner)
            })
        cost.rolesApply = Self.milliseconds(
            try clock.measure {
                var copy = state
                guard case .applied = copy.apply(try VerifiedGroupCommit.verify(signed)) else {
                    throw ValidationError("batch role change rejected")
                }
            })

        cost.removalBuild = Self.milliseconds(
            try clock.measure {
                var remove = Self.commit(on: state, author: owner)
                remove.removeMembers.inboxIds = targets
                let removed = Set(targets)
                let remaining = state.members.values.filter { !removed.contains($0.inboxID.rawValue) }.map(\.identity)
                let key = EpochKeys.newKey()
                remove.epochKeys = try EpochKeys.seal(
                    key, to: remaining, groupID: state.groupID, epoch: state.epoch + 1)
                remove.epochKeyCommitment = EpochKeys.commitment(to: key)
                signed = try VerifiedGroupCommit.sign(remove, by: owner)
            })
        let stays = identities[count - 1]
        cost.removalApply = Self.milliseconds(
            try clock.measure {
                var copy = state
                let verified = try VerifiedGroupCommit.verify(signed)
                guard case .applied = copy.apply(verified) else { throw ValidationError("batch removal rejected") }
                _ = try EpochKeys.open(
                    verified.commit.epochKeys, as: stays, groupID: state.groupID, epoch: copy.epoch,
                    commitment: verified.commit.epochKeyCommitment)
            })

        // The commits a member misses while offline: roles, blocks,
        // welcome messages and profile changes, in turn.
        var log: [WireSignedGroupCommit] = []
        var author = state
        for index in 0..<commits {
            var commit = Self.commit(on: author, author: owner)
            let target = identities[1 + index % (count - 1)].inboxID.rawValue
            switch index % 4 {
            case 0:
                commit.changeRoles.inboxIds = [target]
                commit.changeRoles.role = index % 8 == 0 ? .moderator : .member
            case 1:
                commit.blockMembers.inboxIds = [target]
                commit.blockMembers.blocked = index % 8 == 1
            case 2: commit.setWelcome.text = "Welcome #\(index)"
            default: commit.updateProfile.profile.name = "bench \(index)"
            }
            let signedCommit = try VerifiedGroupCommit.sign(commit, by: owner)
            guard case .applied = author.apply(try VerifiedGroupCommit.verify(signedCommit)) else {
                throw ValidationError("lifecycle commit \(index) rejected")
            }
            log.append(signedCommit)
        }
        cost.catchUp = Self.milliseconds(
            try clock.measure {
                for signedCommit in log {
                    guard case .applied = state.apply(try VerifiedGroupCommit.verify(signedCommit)) else {
                        throw ValidationError("catch-up commit rejected")
                    }
                }
            })
        return cost
    }

    /// A group of `identities` (the first the owner, the rest members),
    /// built by applying its create and add commits.
    static func group(_ identities: [Identity]) throws -> GroupState {
        let owner = identities[0]
        let groupID = Data((0..<16).map { _ in UInt8.random(in: 0...255) }).hexString
        var state = GroupState(groupID: groupID)
        var create = commit(on: state, author: owner)
        create.create.profile.name = "bench"
        _ = state.apply(try VerifiedGroupCommit.verify(VerifiedGroupCommit.sign(create, by: owner)))
        for member in identities.dropFirst() {
            var add = commit(on: state, author: owner)
            add.addMember.member = member.publicIdentity.wireBundle
            add.addMember.role = WireGroupRole.member
            _ = state.apply(try VerifiedGroupCommit.verify(VerifiedGroupCommit.sign(add, by: owner)))
        }
        return state
    }

    struct FanOut {
        var envelopesPerMessage: Double
        var p50: Double
        var max: Double
    }

    /// A group of `members` identities whose log holds the create and the
    /// adds; every member subscribes with its own connection and decrypts.
    private func fanOut(members count: Int, relayURL: URL) async throws -> FanOut {
        var logger = Logger(label: "rally.bench")
        logger.logLevel = .error
        let identities = (0..<count).map { Identity(displayName: "member-\($0)") }
        // The topic as a real group's: its id names its access key, every
        // commit is sealed and published as a control entry with a proof.
        let access = try TopicAccess(secret: TopicAccess.newSecret())
        let topicID = access.foundedTopicID
        let topic = try TopicName.group(topicID)
        let groupID = GroupRecord.groupID(forTopicID: topicID)
        let owner = identities[0]
        let admin = try await RelayConnection.connect(to: relayURL, identity: owner, logger: logger)
        var state = GroupState(groupID: groupID)
        let commitKey = CommitSealing.commitKey(epochKey: EpochKeys.newKey())
        var head: UInt64 = 0
        for index in identities.indices {
            var commit = Self.commit(on: state, author: owner)
            if index == 0 {
                commit.create.profile.name = "bench"
            } else {
                commit.addMember.member = identities[index].publicIdentity.wireBundle
                commit.addMember.role = WireGroupRole.member
            }
            let signed = try VerifiedGroupCommit.sign(commit, by: owner)
            guard case .applied = state.apply(try VerifiedGroupCommit.verify(signed)) else {
                throw ValidationError("bench log invalid")
            }
            var entry = WireGroupLogEntry()
            entry.sealedCommit = try CommitSealing.seal(
                signed, commitKey: commitKey, groupID: groupID, epoch: commit.epoch)
            head = try await Self.publishPatiently(
                admin, topic: topic, payload: FrameCodec.encode(entry), key: commit.commitID, access: access,
                afterControl: head)
        }
        let key = EpochKeys.newKey()
        let epoch = state.epoch
        // Every member connects and subscribes from the head, as after a
        // welcome.
        var connections: [RelayConnection] = []
        var streams: [AsyncThrowingStream<RelayConnection.SubscriptionEvent, any Error>] = []
        for identity in identities {
            let connection = try await RelayConnection.connect(to: relayURL, identity: identity, logger: logger)
            connections.append(connection)
            streams.append(await connection.subscribe(topic: topic, after: head, access: access))
        }
        // Every subscription is live before the first message is timed.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for stream in streams {
                group.addTask {
                    for try await event in stream {
                        if case .caughtUp = event { return }
                    }
                    throw ValidationError("subscription ended before it caught up")
                }
            }
            try await group.waitForAll()
        }
        var latencies: [Double] = []
        var envelopes: UInt64 = 0
        for round in 0..<messages {
            var body = WireMessageBody()
            body.messageID = MessageSealing.newMessageID()
            body.sender = owner.publicIdentity.wireBundle
            body.recipient = groupID
            body.content = try TextCodec().encode("fan-out \(round)")
            var entry = WireGroupLogEntry()
            entry.message = try EpochKeys.encrypt(
                MessageSealing.sign(body, by: owner), key: key, groupID: groupID, epoch: epoch)
            let expectedSeq = head + UInt64(round) + 1
            let start = DispatchTime.now().uptimeNanoseconds
            let ack = try await admin.publish(
                topic: topic, payload: FrameCodec.encode(entry), idempotencyKey: body.messageID, access: access)
            envelopes = ack.seq - head
            let finish = try await withThrowingTaskGroup(of: UInt64.self) { group in
                for stream in streams {
                    group.addTask {
                        for try await event in stream {
                            guard case .envelope(let envelope) = event, envelope.seq == expectedSeq else { continue }
                            let decoded = try WireGroupLogEntry(serializedBytes: envelope.payload)
                            _ = try EpochKeys.decrypt(decoded.message, key: key, groupID: groupID)
                            return DispatchTime.now().uptimeNanoseconds
                        }
                        throw ValidationError("subscription ended")
                    }
                }
                var last: UInt64 = 0
                for try await time in group { last = Swift.max(last, time) }
                return last
            }
            latencies.append(Double(finish - start) / 1_000_000)
        }
        for connection in connections { await connection.close() }
        await admin.close()
        latencies.sort()
        return FanOut(
            envelopesPerMessage: Double(envelopes) / Double(messages), p50: latencies[latencies.count / 2],
            max: latencies.last ?? 0)
    }

    /// Builds a removal commit for a group of `members` and applies it as
    /// one member would.
    private func removalCost(members count: Int) throws -> (Double, Double) {
        let identities = (0..<count).map { Identity(displayName: "member-\($0)") }
        let state = try Self.group(identities)
        let groupID = state.groupID
        let clock = ContinuousClock()
        var signed = WireSignedGroupCommit()
        let buildTime = try clock.measure {
            var remove = Self.commit(on: state, author: identities[0])
            remove.removeMember.inboxID = identities[1].inboxID.rawValue
            let remaining = state.members.values.filter { $0.inboxID != identities[1].inboxID }.map(\.identity)
            let key = EpochKeys.newKey()
            remove.epochKeys = try EpochKeys.seal(key, to: remaining, groupID: groupID, epoch: state.epoch + 1)
            remove.epochKeyCommitment = EpochKeys.commitment(to: key)
            signed = try VerifiedGroupCommit.sign(remove, by: identities[0])
        }
        // The last member who stays (the owner in a group of two).
        let member = identities.last { $0.inboxID != identities[1].inboxID }!
        let applyTime = try clock.measure {
            var copy = state
            let verified = try VerifiedGroupCommit.verify(signed)
            guard case .applied = copy.apply(verified) else { throw ValidationError("removal rejected") }
            _ = try EpochKeys.open(
                verified.commit.epochKeys, as: member, groupID: groupID, epoch: copy.epoch,
                commitment: verified.commit.epochKeyCommitment)
        }
        return (Self.milliseconds(buildTime), Self.milliseconds(applyTime))
    }

    /// Set-up traffic exceeds the per-connection publish rate on purpose;
    /// wait out the limit instead of failing.
    /// Returns the seq the relay gave the control entry.
    static func publishPatiently(
        _ connection: RelayConnection, topic: TopicName, payload: Data, key: Data, access: TopicAccess,
        afterControl: UInt64
    ) async throws -> UInt64 {
        while true {
            let ack: WirePublishAck
            do {
                ack = try await connection.publish(
                    topic: topic, payload: payload, idempotencyKey: key, access: access, control: true,
                    expectedControlSeq: afterControl)
            } catch {
                guard case .rateLimited = error else { throw error }
                try await Task.sleep(for: .milliseconds(250))
                continue
            }
            return ack.seq
        }
    }

    static func milliseconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
    }

    static func commit(on state: GroupState, author: Identity) -> WireGroupCommit {
        var commit = WireGroupCommit()
        commit.groupID = state.groupID
        commit.epoch = state.epoch
        commit.parentTranscript = state.transcript
        commit.commitID = MessageSealing.newMessageID()
        commit.author = author.publicIdentity.wireBundle
        return commit
    }
}
