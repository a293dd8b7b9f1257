import Crypto
import Foundation
import RallyCrypto
import RallyRelay
import RallyTestSupport
import RallyWire
import Testing

@testable import RallyCore

actor SeqLog {
    var values: [UInt64] = []
    func add(_ seq: UInt64) { values.append(seq) }
}

/// What the relay holds, and what a stranger, a removed member, a demoted
/// admin and a forger can do with it (docs/threat-model.md, ADR 0008).
@Suite("The relay is untrusted", .timeLimit(.minutes(2)))
struct UntrustedRelayTests {
    @Test("The relay's database holds no group name, description, invite tag, role or member of a group's log")
    func controlIsConfidential() async throws {
        let world = try await GroupWorld.start()
        let alice = try await world.user("alice")
        let bob = try await world.user("bob")
        let carol = try await world.user("carol")
        let group = try await alice.createGroup(name: "MARKER-7f3a-name", description: "MARKER-7f3a-description")
        _ = try await alice.addMember(bob.inboxID, role: .admin, to: group.groupID)
        _ = try await alice.addMember(carol.inboxID, to: group.groupID)
        let invite = try await alice.createInvite(in: group.groupID)
        _ = try await alice.changeRole(of: carol.inboxID, to: .moderator, in: group.groupID)
        _ = try await alice.removeMember(carol.inboxID, from: group.groupID, ban: true)
        _ = try await alice.sendGroupText("MARKER-7f3a-message", to: group.groupID)
        try await catchUp(bob, group.groupID)
        let topic = try await alice.group(group.groupID).topic.rawValue
        for client in [alice, bob, carol] { await client.disconnect() }
        await world.relay.relay.stop()

        // Nowhere in the relay's files: the group's name, description,
        // messages, or its invite tag (as text or bytes).
        let data = world.relay.directory.path("data")
        let files = try FileManager.default.contentsOfDirectory(atPath: data.path)
        #expect(files.contains("relay.sqlite"))
        // Every file, the blob store's directory included.
        var everything = Data()
        let enumerator = FileManager.default.enumerator(at: data, includingPropertiesForKeys: [.isRegularFileKey])
        while let url = enumerator?.nextObject() as? URL {
            guard (try? url.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true else { continue }
            everything.append(try Data(contentsOf: url))
        }
        let tag = invite.invite.payload.inviteTag
        for marker in ["MARKER-7f3a", group.groupID, tag.hexString] {
            #expect(everything.range(of: Data(marker.utf8)) == nil, "relay files contain \(marker)")
        }
        #expect(everything.range(of: tag) == nil, "relay files contain the invite tag's bytes")

        // The group's log names no member: neither inbox ids nor names
        // nor keys appear in any of its entries. (Inbox ids do appear as
        // inbox topics and in the key directory: that is what they are for.)
        let store = try SQLiteRelayStore(url: data.appendingPathComponent("relay.sqlite"))
        let log = try await store.fetch(topic: topic, after: 0, limit: 1000, nowMilliseconds: 0).envelopes
        #expect(log.count >= 6)
        for member in [alice, bob, carol] {
            let needles = [
                Data(member.inboxID.rawValue.utf8), Data(member.identity.displayName.utf8),
                member.identity.signingKey.publicKey.rawRepresentation,
            ]
            for envelope in log {
                for needle in needles {
                    #expect(envelope.payload.range(of: needle) == nil, "group entry #\(envelope.seq) names a member")
                }
            }
        }
        try await store.close()
        world.relay.directory.remove()
        world.homes.remove()
    }

    @Test("A stranger and a removed member can neither read nor write a group's topic; members keep working")
    func topicNeedsCapability() async throws {
        let world = try await GroupWorld.start()
        let alice = try await world.user("alice")
        let bob = try await world.user("bob")
        let carol = try await world.user("carol")
        let stranger = try await world.user("mallory")
        let groupID = try await alice.createGroup(name: "Keys").groupID
        _ = try await alice.addMember(bob.inboxID, to: groupID)
        _ = try await alice.addMember(carol.inboxID, to: groupID)
        try await catchUp(bob, groupID)
        try await catchUp(carol, groupID)
        let carolRecord = try await carol.group(groupID)
        let topic = carolRecord.topic
        let carolAccess = try #require(carolRecord.topicAccess)

        // A stranger who learned the topic id: no key, or a key of its own.
        let raw = try await RelayConnection.connect(
            to: world.relay.url, identity: stranger.identity, logger: TestLogger.quiet)
        let made = try TopicAccess(secret: TopicAccess.newSecret())
        for access in [nil, made] {
            #expect(await refusal { try await read(raw, topic, access) } == .forbidden)
            #expect(
                await refusal {
                    _ = try await raw.publish(
                        topic: topic, payload: Data("junk".utf8), idempotencyKey: MessageSealing.newMessageID(),
                        access: access)
                } == .forbidden)
        }

        // Carol is removed: her key reads up to and including her removal,
        // then the relay says it was revoked; her publish is refused.
        _ = try await alice.removeMember(carol.inboxID, from: groupID)
        _ = try await alice.sendGroupText("after carol", to: groupID)
        let seen = SeqLog()
        #expect(await refusal { try await read(raw, topic, carolAccess, into: seen) } == .accessRevoked)
        let removalSeq = try await alice.group(groupID).lastControlSeq
        #expect(await seen.values.last == removalSeq)
        #expect(
            await refusal {
                _ = try await raw.publish(
                    topic: topic, payload: Data("let me back in".utf8),
                    idempotencyKey: MessageSealing.newMessageID(), access: carolAccess)
            } == .accessRevoked)
        await raw.close()
        // Carol's own client learns of her removal and stops there.
        _ = try await carol.syncGroup(groupID)
        #expect(try await carol.group(groupID).status == .removed)
        // Members carry on, on the new key.
        #expect(try await bob.syncGroup(groupID).messages.map(\.displayText) == ["after carol"])
        _ = try await bob.sendGroupText("still here", to: groupID)
        #expect(try await alice.syncGroup(groupID).messages.map(\.displayText) == ["still here"])
        await world.stop([alice, bob, carol, stranger])
    }

    /// Reads a topic until the relay ends the subscription.
    func read(
        _ connection: RelayConnection, _ topic: TopicName, _ access: TopicAccess?, into log: SeqLog? = nil
    ) async throws {
        for try await event in await connection.subscribe(topic: topic, after: 0, access: access) {
            if case .envelope(let envelope) = event { await log?.add(envelope.seq) }
        }
    }

    /// The code the relay refused `body` with; nil when it was not refused.
    func refusal(_ body: () async throws -> Void) async -> WireErrorCode? {
        do {
            try await body()
            return nil
        } catch let error as RelayClientError {
            return error.code
        } catch {
            return nil
        }
    }

    /// A welcome of Mallory's making for the real group: its own snapshot
    /// (Mallory as owner), keys and access secret.
    func forgedWelcome(
        for target: RallyClient, by mallory: RallyClient, real: GroupRecord
    ) async throws
        -> WireGroupWelcome
    {
        var state = GroupState(groupID: real.groupID)
        var create = mallory.committer.newCommit(on: state)
        create.create.profile.name = "Not the real one"
        _ = state.apply(try VerifiedGroupCommit.verify(VerifiedGroupCommit.sign(create, by: mallory.identity)))
        var add = mallory.committer.newCommit(on: state)
        add.addMember.member = target.identity.publicIdentity.wireBundle
        add.addMember.role = GroupRole.member.wire
        _ = state.apply(try VerifiedGroupCommit.verify(VerifiedGroupCommit.sign(add, by: mallory.identity)))
        var welcome = WireGroupWelcome()
        welcome.groupID = real.groupID
        welcome.topicID = real.topicID
        welcome.snapshotSeq = 1
        welcome.snapshot = FrameCodec.encode(state.snapshot)
        welcome.epochKey = EpochKeys.newKey().withUnsafeBytes { Data($0) }
        welcome.admissionCommitKey = EpochKeys.newKey().withUnsafeBytes { Data($0) }
        welcome.topicAccessSecret = TopicAccess.newSecret().withUnsafeBytes { Data($0) }
        return welcome
    }

    @Test("A stranger's welcome opens nothing, and a forged welcome does not hide the genuine one")
    func forgedWelcome() async throws {
        let world = try await GroupWorld.start()
        let alice = try await world.user("alice")
        let bob = try await world.user("bob")
        let mallory = try await world.user("mallory")
        let real = try await alice.createGroup(name: "Real")
        _ = try await alice.sendGroupText("before bob", to: real.groupID)

        // Mallory's welcome for the real group id and topic.
        let forged = try await forgedWelcome(for: bob, by: mallory, real: real)
        _ = try await mallory.send(forged, codec: GroupWelcomeCodec(), to: bob.inboxID)
        // And one for a group of her own invention, under a topic id that
        // names no key.
        var invented = forged
        invented.topicID = String(repeating: "ab", count: 32)
        invented.groupID = GroupRecord.groupID(forTopicID: invented.topicID)
        var inventedSnapshot = try WireGroupSnapshot(serializedBytes: forged.snapshot)
        inventedSnapshot.groupID = invented.groupID
        invented.snapshot = FrameCodec.encode(inventedSnapshot)
        _ = try await mallory.send(invented, codec: GroupWelcomeCodec(), to: bob.inboxID)
        let report = try await bob.syncInbox()
        #expect(report.received.count == 2)
        #expect(try await bob.groups().isEmpty)

        // The genuine welcome still opens the real group.
        _ = try await alice.addMember(bob.inboxID, to: real.groupID)
        _ = try await bob.syncInbox()
        let opened = try await bob.group(real.groupID)
        #expect(opened.state == (try await alice.group(real.groupID)).state)
        #expect(opened.state.role(of: alice.inboxID) == .owner)
        #expect(opened.state.members[mallory.inboxID] == nil)
        _ = try await bob.sendGroupText("hi, real group", to: real.groupID)
        #expect(try await alice.syncGroup(real.groupID).messages.map(\.displayText) == ["hi, real group"])
        await world.stop([alice, bob, mallory])
    }

    @Test("A demoted admin cannot read join requests made with later invites nor make a joiner take its answer")
    func demotedAdminLosesJoinProcessing() async throws {
        let world = try await GroupWorld.start()
        let alice = try await world.user("alice")
        let bob = try await world.user("bob")
        let dave = try await world.user("dave")
        let groupID = try await alice.createGroup(name: "Club").groupID
        _ = try await alice.addMember(bob.inboxID, role: .admin, to: groupID)
        let before = try await alice.createInvite(in: groupID)
        try await catchUp(bob, groupID)
        let oldSeed = try #require(try bob.store.inviteSeed(group: groupID))
        let oldKeys = try InviteKeys(seed: oldSeed)
        #expect(oldKeys.identity.inboxID.rawValue == before.invite.payload.joinInboxID)

        _ = try await alice.changeRole(of: bob.inboxID, to: .member, in: groupID)
        try await catchUp(bob, groupID)
        let after = try await alice.createInvite(in: groupID)
        #expect(after.invite.payload.joinInboxID != before.invite.payload.joinInboxID)
        // The old invite no longer admits anyone.
        #expect(try await alice.group(groupID).state.retiredInviteTags.contains(before.invite.payload.inviteTag))

        let attempt = try await requestJoin(dave, after.appLink)
        // Bob reads every join inbox he holds keys for: not the new one.
        let bobReports = try await bob.processJoinRequests()
        #expect(bobReports.allSatisfy { $0.joiner != dave.inboxID })
        // He answers first anyway, as the old invite identity, with the
        // message id the real answer would have: Dave drops it.
        let falseError = InviteJoinError(
            errorType: .conversationExpired, inviteTag: after.invite.payload.inviteTag.hexString, timestamp: Date(),
            reason: "the group was exploded")
        let oldInviteContext = await bob.inviterDesk.inviteContext(oldKeys)
        _ = try await DirectMessageService(context: oldInviteContext).send(
            falseError, codec: InviteJoinErrorCodec(), to: dave.inboxID,
            messageID: InviteJoinError.messageID(forRequest: try #require(Data(hexString: attempt.requestID))),
            keepCopy: false)
        #expect(try await joinState(dave, attempt).phase == .joining)

        // Alice answers: Dave is in.
        _ = try await alice.processJoinRequests()
        #expect(try await joinState(dave, attempt).phase == .joined)
        await world.stop([alice, bob, dave])
    }

    @Test("A removed admin's old invite identity is retired: its invites are revoked and later requests go elsewhere")
    func removedAdminLosesJoinProcessing() async throws {
        let world = try await GroupWorld.start()
        let alice = try await world.user("alice")
        let bob = try await world.user("bob")
        let erin = try await world.user("erin")
        let groupID = try await alice.createGroup(name: "Club").groupID
        _ = try await alice.addMember(bob.inboxID, role: .admin, to: groupID)
        let before = try await alice.createInvite(in: groupID)
        _ = try await alice.removeMember(bob.inboxID, from: groupID)
        let state = try await alice.group(groupID).state
        #expect(state.retiredInviteIdentities.map(\.inboxID.rawValue) == [before.invite.payload.joinInboxID])
        // Alice still reads the retired join inbox: a request made with the
        // old invite is answered invite_revoked, not left waiting.
        let old = try await requestJoin(erin, before.appLink)
        _ = try await alice.processJoinRequests()
        #expect(try await joinState(erin, old).errorType == .inviteRevoked)
        // A request with a new invite is admitted.
        let after = try await alice.createInvite(in: groupID)
        let attempt = try await requestJoin(erin, after.appLink)
        _ = try await alice.processJoinRequests()
        #expect(try await joinState(erin, attempt).phase == .joined)
        await world.stop([alice, bob, erin])
    }

    /// A group of Alice (owner), Bob and Carol where Bob reaches the relay
    /// only through a proxy that can withhold envelopes from him.
    struct SplitWorld {
        let relay: TestRelay
        let proxy: WithholdingProxy
        let homes: TemporaryDirectory
        let alice: RallyClient
        let bob: RallyClient
        let carol: RallyClient
        let groupID: String

        static func start() async throws -> SplitWorld {
            let relayBox = URLBox()
            let proxy = try await WithholdingProxy.start { await relayBox.url }
            // Everyone goes through the proxy; it lies to Bob only.
            let relay = try await TestRelay.start(publicURL: proxy.url)
            // The relay itself, not its public URL (which is the proxy's).
            await relayBox.set(URL(string: "http://127.0.0.1:\(relay.relay.port)")!)
            let homes = TemporaryDirectory("rally-split")
            func user(_ name: String, via url: URL) async throws -> RallyClient {
                try await RallyClient.create(
                    home: homes.path(name), relayURL: url, displayName: name, logger: TestLogger.quiet)
            }
            let alice = try await user("alice", via: proxy.url)
            let bob = try await user("bob", via: proxy.url)
            let carol = try await user("carol", via: proxy.url)
            let groupID = try await alice.createGroup(name: "Split").groupID
            _ = try await alice.addMember(bob.inboxID, to: groupID)
            _ = try await alice.addMember(carol.inboxID, to: groupID)
            try await catchUp(bob, groupID)
            try await catchUp(carol, groupID)
            return SplitWorld(
                relay: relay, proxy: proxy, homes: homes, alice: alice, bob: bob, carol: carol, groupID: groupID)
        }

        func stop() async {
            for client in [alice, bob, carol] { await client.disconnect() }
            await proxy.stop()
            await relay.stop()
            homes.remove()
        }
    }

    @Test("A relay that sends a group's entries twice: a live follower shows each message once")
    func replayedEntriesShownOnce() async throws {
        let w = try await SplitWorld.start()
        let topic = try await w.bob.group(w.groupID).topic.rawValue
        let bobKey = w.bob.identity.signingKey.publicKey.rawRepresentation
        await w.proxy.replay { key, envelope in key == bobKey && envelope.topic == topic }
        let shown = Arrivals<String>()
        let following = Task {
            try await w.bob.followGroup(w.groupID, untilCaughtUp: false) { event in
                if case .message(let message) = event { await shown.append(message.displayText) }
            }
        }
        for text in ["one", "two", "three"] { _ = try await w.alice.sendGroupText(text, to: w.groupID) }
        await shown.wait { $0.count >= 3 }
        // Each copy of "one" and "two" came before the next message did.
        #expect(await shown.values == ["one", "two", "three"])
        #expect(await w.proxy.replayed.count >= 2)
        following.cancel()
        await w.stop()
    }

    @Test("A relay that withholds a removal from one member: that member finds out, says so, and sends nothing more")
    func withheldRemovalIsDetected() async throws {
        let w = try await SplitWorld.start()
        let topic = try await w.alice.group(w.groupID).topic.rawValue
        let head = try await w.alice.group(w.groupID).lastControlSeq
        // The next control entry (Alice's removal of Carol) never reaches Bob.
        let bobKey = w.bob.identity.signingKey.publicKey.rawRepresentation
        await w.proxy.withhold { key, envelope in
            key == bobKey && envelope.topic == topic && envelope.control && envelope.seq > head
        }
        _ = try await w.alice.removeMember(w.carol.inboxID, from: w.groupID)
        _ = try await w.alice.sendGroupText("carol is gone", to: w.groupID)

        let report = try await w.bob.syncGroup(w.groupID)
        #expect(await w.proxy.withheld.count == 1)
        #expect(report.events.contains { if case .diverged = $0 { true } else { false } })
        #expect(try await w.bob.group(w.groupID).divergence != nil)
        // Bob's client refuses to send into the history he was shown.
        var refusal: RallyClientError?
        do {
            _ = try await w.bob.sendGroupText("carol, are you there?", to: w.groupID)
        } catch {
            refusal = error
        }
        guard case .group(.diverged(_, let reason))? = refusal else {
            Issue.record("a diverged member was not stopped: \(String(describing: refusal))")
            return
        }
        #expect(reason.contains("was shown no change"))
        // Nothing from Bob reached the log after the removal.
        #expect(try await w.alice.syncGroup(w.groupID).messages.isEmpty)
        await w.stop()
    }

    @Test("A relay that withholds a commit but keeps serving: the next epoch's entries give it away")
    func withheldCommitIsDetectedFromTheNextEpoch() async throws {
        let w = try await SplitWorld.start()
        let dave = try await RallyClient.create(
            home: w.homes.path("dave"), relayURL: w.proxy.url, displayName: "dave", logger: TestLogger.quiet)
        let topic = try await w.alice.group(w.groupID).topic.rawValue
        let head = try await w.alice.group(w.groupID).lastControlSeq
        let bobKey = w.bob.identity.signingKey.publicKey.rawRepresentation
        await w.proxy.withhold { key, envelope in
            key == bobKey && envelope.topic == topic && envelope.control && envelope.seq > head
        }
        // Adding Dave keeps the topic key: Bob keeps reading, but misses the add.
        _ = try await w.alice.addMember(dave.inboxID, to: w.groupID)
        _ = try await w.alice.sendGroupText("welcome dave", to: w.groupID)

        let report = try await w.bob.syncGroup(w.groupID)
        let diverged = report.events.compactMap { event -> String? in
            if case .diverged(_, let reason) = event { reason } else { nil }
        }
        #expect(diverged.count == 1, "\(report.events)")
        #expect(diverged.first?.contains("never received the commit") == true)
        #expect(report.messages.isEmpty)
        await #expect(throws: RallyClientError.self) { _ = try await w.bob.sendGroupText("hello?", to: w.groupID) }
        // Carol, shown the real log, is fine.
        #expect(try await w.carol.syncGroup(w.groupID).messages.map(\.displayText) == ["welcome dave"])
        await dave.disconnect()
        await w.stop()
    }
}

actor URLBox {
    var url = URL(string: "http://127.0.0.1:1")!
    func set(_ url: URL) { self.url = url }
}
