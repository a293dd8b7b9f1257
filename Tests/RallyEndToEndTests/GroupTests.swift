import Crypto
import Foundation
import RallyCrypto
import RallyTestSupport
import RallyTesting
import RallyWire
import Testing

@testable import RallyCore

/// A relay and a set of users with their own homes.
struct GroupWorld {
    let relay: TestRelay
    let homes: TemporaryDirectory

    static func start() async throws -> GroupWorld {
        GroupWorld(relay: try await TestRelay.start(), homes: TemporaryDirectory("rally-groups"))
    }

    func user(_ name: String, transport: (any RelayTransport)? = nil) async throws -> RallyClient {
        try await RallyClient.create(
            home: homes.path(name), relayURL: relay.url, displayName: name, logger: TestLogger.quiet,
            transport: transport)
    }

    func stop(_ clients: [RallyClient]) async {
        for client in clients { await client.disconnect() }
        await relay.stop()
        homes.remove()
    }
}

/// Picks up welcomes, then reads the group log.
@discardableResult
func catchUp(_ client: RallyClient, _ groupID: String) async throws -> GroupSyncReport {
    _ = try await client.syncInbox()
    return try await client.syncGroup(groupID)
}

func memberList(_ client: RallyClient, _ groupID: String) async throws -> [String] {
    try await client.group(groupID).state.sortedMembers.map { "\($0.identity.displayName):\($0.role)" }
}

@Suite("Groups through a real relay", .timeLimit(.minutes(10)))
struct GroupTests {
    @Test("Three members exchange messages; a removed member reads nothing after removal and its posts are rejected")
    func threeMembersAndRemoval() async throws {
        let world = try await GroupWorld.start()
        let alice = try await world.user("alice")
        let bob = try await world.user("bob")
        let carol = try await world.user("carol")
        let group = try await alice.createGroup(name: "Picnic")
        let groupID = group.groupID
        #expect(group.state.role(of: alice.inboxID) == .owner)
        _ = try await alice.addMember(bob.inboxID, to: groupID)
        _ = try await alice.addMember(carol.inboxID, to: groupID)
        try await catchUp(bob, groupID)
        try await catchUp(carol, groupID)

        _ = try await alice.sendGroupText("hello all", to: groupID)
        _ = try await bob.sendGroupText("hi from bob", to: groupID)
        #expect(try await carol.syncGroup(groupID).messages.map(\.displayText) == ["hello all", "hi from bob"])
        #expect(try await alice.syncGroup(groupID).messages.map(\.displayText) == ["hi from bob"])

        let oldEpoch = try await carol.group(groupID).state.epoch
        _ = try await alice.removeMember(carol.inboxID, from: groupID)
        _ = try await alice.sendGroupText("after carol left", to: groupID)

        let carolReport = try await carol.syncGroup(groupID)
        #expect(carolReport.messages.isEmpty)
        #expect(try await carol.group(groupID).status == .removed)
        #expect(try carol.store.messages(conversation: groupID).map(\.displayText) == ["hello all", "hi from bob"])
        #expect(try await bob.syncGroup(groupID).messages.map(\.displayText) == ["after carol left"])

        // Carol's own client refuses to post...
        await #expect(throws: RallyClientError.self) { _ = try await carol.sendGroupText("still here?", to: groupID) }
        // ...and a post forged with the old epoch key, bypassing it, is
        // rejected by everyone else.
        let oldKey = try #require(try carol.store.epochKey(group: groupID, epoch: oldEpoch))
        var body = WireMessageBody()
        body.messageID = MessageSealing.newMessageID()
        body.sender = carol.identity.publicIdentity.wireBundle
        body.recipient = groupID
        body.content = try TextCodec().encode("let me back in")
        var entry = WireGroupLogEntry()
        entry.message = try EpochKeys.encrypt(
            MessageSealing.sign(body, by: carol.identity), key: oldKey, groupID: groupID, epoch: oldEpoch)
        let raw = try await RelayConnection.connect(to: world.relay.url, identity: nil, logger: TestLogger.quiet)
        let topic = try await carol.group(groupID).topic
        // The relay refuses it: Carol's topic key was replaced with the key.
        do {
            _ = try await raw.publish(
                topic: topic, payload: FrameCodec.encode(entry), idempotencyKey: body.messageID,
                access: try await carol.group(groupID).topicAccess)
            Issue.record("the relay stored a removed member's post")
        } catch {
            #expect((error as? RelayClientError)?.code == .accessRevoked)
        }
        // A relay that stores it anyway (here: with Bob's current key, as a
        // colluding relay could) gains nothing: every member rejects it.
        _ = try await raw.publish(
            topic: topic, payload: FrameCodec.encode(entry), idempotencyKey: body.messageID,
            access: try await bob.group(groupID).topicAccess)
        await raw.close()
        for member in [alice, bob] {
            let report = try await member.syncGroup(groupID)
            #expect(report.messages.isEmpty)
            #expect(report.rejections.map(\.reason) == [.senderNotAMember(carol.inboxID)])
            #expect(try member.store.messages(conversation: groupID).allSatisfy { $0.displayText != "let me back in" })
        }
        await world.stop([alice, bob, carol])
    }

    @Test("Two admins remove each other at the same epoch: exactly one removal takes effect, everywhere")
    func mutualRemoval() async throws {
        let world = try await GroupWorld.start()
        let alice = try await world.user("alice")
        let bob = try await world.user("bob")
        let carol = try await world.user("carol")
        let dave = try await world.user("dave")
        let groupID = try await alice.createGroup(name: "Council").groupID
        _ = try await alice.addMember(bob.inboxID, role: .admin, to: groupID)
        _ = try await alice.addMember(carol.inboxID, role: .admin, to: groupID)
        _ = try await alice.addMember(dave.inboxID, to: groupID)
        for client in [bob, carol, dave] { try await catchUp(client, groupID) }

        // Both build their removal on the same state before either is
        // published: a true conflict.
        let bobState = try await bob.group(groupID).state
        let carolState = try await carol.group(groupID).state
        #expect(bobState.epoch == carolState.epoch)
        let bobCommit = try await removal(by: bob, of: carol.inboxID, state: bobState)
        let carolCommit = try await removal(by: carol, of: bob.inboxID, state: carolState)
        let bobRecord = try await bob.group(groupID)
        let carolRecord = try await carol.group(groupID)
        let bobEntry = try bob.committer.sealedEntry(bobCommit, record: bobRecord)
        let carolEntry = try carol.committer.sealedEntry(carolCommit, record: carolRecord)
        let raw = try await RelayConnection.connect(to: world.relay.url, identity: nil, logger: TestLogger.quiet)
        func publish(
            _ sealed: (entry: WireGroupLogEntry, rotateAccessKey: Data?), _ commit: WireGroupCommit,
            _ record: GroupRecord
        ) async -> Result<WirePublishAck, RelayClientError> {
            do {
                return .success(
                    try await raw.publish(
                        topic: record.topic, payload: FrameCodec.encode(sealed.entry),
                        idempotencyKey: commit.commitID, access: record.topicAccess, control: true,
                        expectedControlSeq: record.lastControlSeq, rotateAccessKey: sealed.rotateAccessKey))
            } catch {
                return .failure(error)
            }
        }
        async let first = publish(bobEntry, bobCommit, bobRecord)
        async let second = publish(carolEntry, carolCommit, carolRecord)
        let results = await [first, second]
        await raw.close()
        // The relay stores one control entry per position: the other gets
        // CONFLICT and is never stored.
        let stored = results.compactMap { try? $0.get() }
        #expect(stored.count == 1)
        #expect(
            results.contains {
                // The loser built on the key the winner replaced.
                if case .failure(let error) = $0 {
                    error.code == .conflict || error.code == .accessRevoked
                } else {
                    false
                }
            })

        var lists: [[String]] = []
        var epochs: [UInt64] = []
        for client in [alice, bob, carol, dave] {
            try await catchUp(client, groupID)
            lists.append(try await memberList(client, groupID))
            epochs.append(try await client.group(groupID).state.epoch)
        }
        #expect(Set(lists.map { $0.joined(separator: ",") }).count == 1, "members disagree: \(lists)")
        #expect(Set(epochs).count == 1)
        let survivors = lists[0]
        let bobStayed = survivors.contains("bob:admin")
        let carolStayed = survivors.contains("carol:admin")
        #expect(bobStayed != carolStayed, "exactly one of the two must remain: \(survivors)")
        // The winner is the commit the relay stored.
        let bobFirst = (try? results[0].get()) != nil
        #expect(bobStayed == bobFirst)
        let loser = bobStayed ? carol : bob
        #expect(try await loser.group(groupID).status == .removed)
        await world.stop([alice, bob, carol, dave])
    }

    @Test("A commit that loses a race is rebuilt on the new state and applied automatically")
    func staleCommitIsRebuilt() async throws {
        let world = try await GroupWorld.start()
        let alice = try await world.user("alice")
        let carol = try await world.user("carol")
        let dave = try await world.user("dave")
        // Bob's commits pass a transport that lets the test act between
        // his building a commit and the relay receiving it.
        let attempts = AttemptLog()
        let race = RaceTrigger()
        let bob = try await world.user(
            "bob",
            transport: InterceptingTransport(base: WebSocketTransport(relayURL: world.relay.url)) { publish in
                guard publish.control else { return }
                await attempts.record(publish.expectedControlSeq)
                await race.fire()
            })
        let groupID = try await alice.createGroup(name: "Race").groupID
        _ = try await alice.addMember(bob.inboxID, role: .admin, to: groupID)
        try await catchUp(bob, groupID)

        // Bob builds his add on the head; before he publishes, Alice's add
        // lands there. The relay refuses Bob's first commit (CONFLICT) and
        // he rebuilds it on the new head.
        await race.arm { _ = try? await alice.addMember(carol.inboxID, to: groupID) }
        _ = try await bob.addMember(dave.inboxID, to: groupID)
        let seen = await attempts.values
        #expect(seen.count == 2)
        #expect(seen.count == 2 && seen[1] > seen[0])

        for client in [alice, bob] { try await catchUp(client, groupID) }
        let expected = ["alice:owner", "bob:admin", "carol:member", "dave:member"].sorted()
        #expect(try await memberList(alice, groupID).sorted() == expected)
        #expect(try await memberList(bob, groupID).sorted() == expected)
        // Dave got a welcome and reads the same state.
        try await catchUp(dave, groupID)
        #expect(try await memberList(dave, groupID).sorted() == expected)
        #expect(try await dave.group(groupID).state == alice.group(groupID).state)
        await world.stop([alice, bob, carol, dave])
    }

    @Test("A member offline during several commits catches up to the same state and epoch")
    func offlineCatchUp() async throws {
        let world = try await GroupWorld.start()
        let alice = try await world.user("alice")
        let bob = try await world.user("bob")
        let erin = try await world.user("erin")
        let frank = try await world.user("frank")
        let groupID = try await alice.createGroup(name: "Travellers").groupID
        _ = try await alice.addMember(bob.inboxID, to: groupID)
        try await catchUp(bob, groupID)
        await bob.disconnect()
        let bobEpochBefore = try await bob.group(groupID).state.epoch

        // Bob is away for all of this.
        _ = try await alice.addMember(erin.inboxID, role: .moderator, to: groupID)
        _ = try await alice.sendGroupText("erin joined", to: groupID)
        _ = try await alice.changeRole(of: erin.inboxID, to: .admin, in: groupID)
        _ = try await alice.addMember(frank.inboxID, to: groupID)
        _ = try await alice.removeMember(erin.inboxID, from: groupID)
        _ = try await alice.sendGroupText("erin left us", to: groupID)

        let bobAgain = try RallyClient.open(
            home: world.homes.path("bob"), relayURL: world.relay.url, logger: TestLogger.quiet)
        let report = try await bobAgain.syncGroup(groupID)
        #expect(report.messages.map(\.displayText) == ["erin joined", "erin left us"])
        let aliceState = try await alice.group(groupID).state
        let bobState = try await bobAgain.group(groupID).state
        #expect(bobState == aliceState)
        #expect(bobState.epoch == bobEpochBefore + 4)  // add, change role, add, remove
        // And Bob holds the current epoch key: he can still talk.
        _ = try await bobAgain.sendGroupText("back online", to: groupID)
        #expect(try await alice.syncGroup(groupID).messages.map(\.displayText) == ["back online"])
        await world.stop([alice, bobAgain, erin, frank])
    }

    func removal(by client: RallyClient, of target: InboxID, state: GroupState) async throws -> WireGroupCommit {
        var commit = client.committer.newCommit(on: state)
        commit.removeMember.inboxID = target.rawValue
        try client.committer.attachFreshKey(
            to: &commit, for: state.members.values.filter { $0.inboxID != target }, state: state)
        return commit
    }
}

actor AttemptLog {
    var values: [UInt64] = []
    func record(_ value: UInt64) { values.append(value) }
}

/// Runs an action once, at the next publish after it is armed.
actor RaceTrigger {
    private var action: (@Sendable () async -> Void)?
    func arm(_ action: @escaping @Sendable () async -> Void) { self.action = action }
    func fire() async {
        guard let action else { return }
        self.action = nil
        await action()
    }
}
