import Foundation
import RallyCrypto
import RallyTestSupport
import RallyTesting
import RallyWire
import Testing

@testable import RallyCore

/// Clients on real SQLite homes against an in-memory relay: join, commit
/// races, rekeys and retries without sockets, with a clock whose pauses
/// return at once.
struct InMemoryWorld {
    let relay = InMemoryRelay()
    let homes = TemporaryDirectory("rally-client-flows")
    static let clock = ClientClock(now: { Date(timeIntervalSince1970: 1_800_000_000) }, sleep: { _ in })

    func user(_ name: String) async throws -> RallyClient {
        try await RallyClient.create(
            home: homes.path(name), relayURL: URL(string: "memory://relay")!, displayName: name,
            logger: TestLogger.quiet, transport: relay.transport(), clock: Self.clock)
    }

    /// An owner with a group and a single-use invite, and a joiner whose
    /// request is on its way.
    func joinUnderWay() async throws -> (
        owner: RallyClient, joiner: RallyClient, group: GroupRecord, attempt: JoinAttempt
    ) {
        let owner = try await user("owner")
        let joiner = try await user("joiner")
        let group = try await owner.createGroup(name: "Book club")
        let invite = try await owner.createInvite(in: group.groupID, options: InviteOptions(singleUse: true))
        return (owner, joiner, group, try await joiner.startJoin(invite.appLink))
    }

    func members(_ client: RallyClient, _ groupID: String) async throws -> [String] {
        try await client.group(groupID).state.members.values.map { "\($0.identity.displayName):\($0.role)" }.sorted()
    }
}

/// Records each control publish's expected seq, and runs a race once.
private actor Races {
    var expectedSeqs: [UInt64] = []
    private var action: (@Sendable () async -> Void)?

    func arm(_ action: @escaping @Sendable () async -> Void) { self.action = action }

    func saw(_ publish: InMemoryRelay.Publish) async {
        guard publish.control else { return }
        expectedSeqs.append(publish.expectedControlSeq)
        if let action {
            self.action = nil
            await action()
        }
    }
}

@Suite("Client flows on an in-memory relay")
struct ClientFlowTests {
    @Test("A joiner with an invite is admitted by the admin's desk and its join ends `joined`")
    func joinThroughInvite() async throws {
        let world = InMemoryWorld()
        defer { world.homes.remove() }
        let (owner, joiner, group, attempt) = try await world.joinUnderWay()
        #expect(attempt.phase == .joining)
        let reports = try await owner.processJoinRequests()
        #expect(reports.map(\.decision?.isAdmission) == [true])
        _ = try await joiner.syncInbox()
        let joined = try await joiner.joinAttempt(attempt.requestID)
        #expect(joined.phase == .joined)
        #expect(joined.groupID == group.groupID)
        _ = try await owner.syncGroup(group.groupID)
        #expect(try await joiner.group(group.groupID).state == owner.group(group.groupID).state)
        #expect(try await world.members(joiner, group.groupID) == ["joiner:member", "owner:owner"])
    }

    @Test(
        "An admission cut off after its commit, before the welcome, is finished on the next pass: one commit, and the joiner joins"
    )
    func admissionCutAfterItsCommitIsFinished() async throws {
        let world = InMemoryWorld()
        defer { world.homes.remove() }
        let (owner, joiner, group, attempt) = try await world.joinUnderWay()
        let topic = try await owner.group(group.groupID).topic
        let entriesBefore = await world.relay.entries(of: topic).count

        // The admission commit is stored; then the relay is lost for the
        // admin's next step, and the pass ends with an error.
        let races = Races()
        await world.relay.beforePublish { publish in
            guard publish.publisher == owner.inboxID else { return }
            await races.saw(publish)
        }
        await races.arm { await world.relay.failNext([.disconnected("the relay went away")]) }
        do {
            let reports = try await owner.processJoinRequests()
            Issue.record("the cut pass was expected to fail, it reported \(reports)")
        } catch {
            guard case .relay(let cause) = error, cause.isTransient else {
                Issue.record("the cut pass failed with \(error), not a transient relay error")
                return
            }
        }
        #expect(await world.relay.entries(of: topic).count == entriesBefore + 1)
        _ = try await joiner.syncInbox()
        #expect(try await joiner.joinAttempt(attempt.requestID).phase == .joining)

        // The next pass finds its own commit and sends the welcome.
        let reports = try await owner.processJoinRequests()
        guard case .admit(let admission)? = reports.first?.decision, reports.count == 1 else {
            Issue.record("expected the admission again, got \(reports)")
            return
        }
        #expect(admission.committed)
        #expect(await world.relay.entries(of: topic).count == entriesBefore + 1)
        _ = try await joiner.syncInbox()
        #expect(try await joiner.joinAttempt(attempt.requestID).phase == .joined)
        #expect(try await world.members(joiner, group.groupID) == ["joiner:member", "owner:owner"])
        // Answered and recorded: a third pass has nothing to do.
        #expect(try await owner.processJoinRequests().isEmpty)
    }

    @Test("A second joiner with a used single-use invite gets `single_use_consumed`")
    func usedInviteIsRefused() async throws {
        let world = InMemoryWorld()
        defer { world.homes.remove() }
        let owner = try await world.user("owner")
        let first = try await world.user("first")
        let second = try await world.user("second")
        let group = try await owner.createGroup(name: "Once")
        let invite = try await owner.createInvite(in: group.groupID, options: InviteOptions(singleUse: true))
        _ = try await first.startJoin(invite.appLink)
        _ = try await owner.processJoinRequests()
        let late = try await second.startJoin(invite.appLink)
        let reports = try await owner.processJoinRequests()
        #expect(reports.map(\.decision) == [.reject(.singleUseConsumed, reason: "the single-use invite was used")])
        _ = try await second.syncInbox()
        let failed = try await second.joinAttempt(late.requestID)
        #expect(failed.phase == .failed)
        #expect(failed.errorType == .singleUseConsumed)
    }

    @Test("A commit that loses the race to another is rebuilt on the new head and applied")
    func lostRaceIsRebuilt() async throws {
        let world = InMemoryWorld()
        defer { world.homes.remove() }
        let alice = try await world.user("alice")
        let bob = try await world.user("bob")
        let carol = try await world.user("carol")
        let dave = try await world.user("dave")
        let groupID = try await alice.createGroup(name: "Race").groupID
        _ = try await alice.addMember(bob.inboxID, role: .admin, to: groupID)
        _ = try await bob.syncInbox()

        let races = Races()
        await world.relay.beforePublish { publish in
            guard publish.publisher == bob.inboxID else { return }
            await races.saw(publish)
        }
        // Between Bob's building his add and the relay storing it, Alice's
        // add lands on the same head.
        await races.arm { _ = try? await alice.addMember(carol.inboxID, to: groupID) }
        _ = try await bob.addMember(dave.inboxID, to: groupID)

        let seqs = await races.expectedSeqs
        #expect(seqs.count == 2)
        #expect(seqs.count == 2 && seqs[1] > seqs[0])
        _ = try await alice.syncGroup(groupID)
        let expected = ["alice:owner", "bob:admin", "carol:member", "dave:member"]
        #expect(try await world.members(alice, groupID) == expected)
        #expect(try await world.members(bob, groupID) == expected)
        _ = try await dave.syncInbox()
        _ = try await dave.syncGroup(groupID)
        #expect(try await dave.group(groupID).state == alice.group(groupID).state)
    }

    @Test("After a removal the others hold a new key; the removed member reads nothing after it")
    func removalRekeys() async throws {
        let world = InMemoryWorld()
        defer { world.homes.remove() }
        let alice = try await world.user("alice")
        let bob = try await world.user("bob")
        let carol = try await world.user("carol")
        let groupID = try await alice.createGroup(name: "Keys").groupID
        _ = try await alice.addMember(bob.inboxID, to: groupID)
        _ = try await alice.addMember(carol.inboxID, to: groupID)
        for member in [bob, carol] {
            _ = try await member.syncInbox()
            _ = try await member.syncGroup(groupID)
        }
        let before = try await alice.group(groupID).state.epoch
        _ = try await alice.removeMember(carol.inboxID, from: groupID)
        _ = try await alice.sendGroupText("after carol", to: groupID)

        let bobRead = try await bob.syncGroup(groupID)
        #expect(bobRead.messages.map(\.displayText) == ["after carol"])
        let epoch = try await bob.group(groupID).state.epoch
        #expect(epoch == before + 1)
        #expect(try bob.store.epochKey(group: groupID, epoch: epoch) != nil)

        let carolRead = try await carol.syncGroup(groupID)
        #expect(carolRead.messages.isEmpty)
        #expect(try await carol.group(groupID).status == .removed)
        #expect(try carol.store.epochKey(group: groupID, epoch: epoch) == nil)
    }

    @Test("A publish that meets transient failures is retried with its idempotency key and stored once")
    func transientFailuresAreRetried() async throws {
        let world = InMemoryWorld()
        defer { world.homes.remove() }
        let alice = try await world.user("alice")
        let bob = try await world.user("bob")
        _ = try await alice.lookUp(bob.inboxID)
        await world.relay.failNext([.disconnected("drop 1"), .timedOut("drop 2")])
        let before = await world.relay.storedCount
        _ = try await alice.sendText("through the storm", to: bob.inboxID)
        #expect(await world.relay.entries(of: bob.inboxTopic).count == 1)
        #expect(await world.relay.storedCount == before + 1)
        let report = try await bob.syncInbox()
        #expect(report.received.map(\.displayText) == ["through the storm"])
    }

    @Test("A relay refusal is not retried: the caller sees it")
    func refusalIsFinal() async throws {
        let world = InMemoryWorld()
        defer { world.homes.remove() }
        let alice = try await world.user("alice")
        let bob = try await world.user("bob")
        _ = try await alice.lookUp(bob.inboxID)
        await world.relay.failNext([.quotaExceeded(topic: bob.inboxTopic.rawValue, message: "full")])
        await #expect(throws: RallyClientError.relay(.quotaExceeded(topic: bob.inboxTopic.rawValue, message: "full"))) {
            _ = try await alice.sendText("too much", to: bob.inboxID)
        }
        #expect(await world.relay.entries(of: bob.inboxTopic).isEmpty)
    }
}

/// A secret store in memory whose epoch-key reads fail while `failing` is
/// set: a store error in the middle of reading a group's log.
private final class FlakySecretStore: SecretStore, @unchecked Sendable {
    // Safe: every access to `values` and `failing` holds `lock`. (Not a
    // `Mutex`: the package supports macOS 14, which lacks it.)
    private let lock = NSLock()
    private var values: [String: Data] = [:]
    private var failing = false

    struct ReadFailed: Error {}

    func fail(_ on: Bool) { lock.withLock { failing = on } }

    func secret(named name: SecretName) throws -> Data? {
        try lock.withLock {
            if failing, name.rawValue.hasPrefix("epoch-key/") { throw ReadFailed() }
            return values[name.rawValue]
        }
    }

    func setSecret(_ secret: Data, named name: SecretName) throws { lock.withLock { values[name.rawValue] = secret } }
    func removeSecret(named name: SecretName) throws { _ = lock.withLock { values.removeValue(forKey: name.rawValue) } }
}

@Suite("A store error while reading a group's log")
struct StoreErrorTests {
    @Test("A failing epoch-key read stops the sync before the entry; the next sync delivers the message")
    func storeErrorNeverSkips() async throws {
        let world = InMemoryWorld()
        defer { world.homes.remove() }
        let alice = try await world.user("alice")
        let secrets = FlakySecretStore()
        let bob = try await RallyClient.create(
            home: world.homes.path("bob"), relayURL: URL(string: "memory://relay")!, displayName: "bob",
            logger: TestLogger.quiet, secrets: secrets, transport: world.relay.transport(), clock: InMemoryWorld.clock)
        let group = try await alice.createGroup(name: "Careful")
        _ = try await alice.addMember(bob.inboxID, to: group.groupID)
        _ = try await bob.syncInbox()
        _ = try await bob.syncGroup(group.groupID)
        _ = try await alice.sendGroupText("do not lose me", to: group.groupID)
        let cursor = try bob.store.cursor(for: group.topic)

        secrets.fail(true)
        await #expect(throws: RallyClientError.self) { try await bob.syncGroup(group.groupID) }
        #expect(try bob.store.cursor(for: group.topic) == cursor)
        #expect(try await bob.groupMessages(in: group.groupID).isEmpty)

        secrets.fail(false)
        let report = try await bob.syncGroup(group.groupID)
        #expect(report.messages.map(\.displayText) == ["do not lose me"])
        #expect(try bob.store.cursor(for: group.topic) > cursor)
    }
}

@Suite("Backoff")
struct BackoffTests {
    @Test("The ceiling doubles from the base and stops at the cap")
    func ceilingDoubles() {
        let backoff = Backoff(base: .milliseconds(200), cap: .seconds(30))
        #expect(
            (1...10).map { backoff.ceiling(attempt: $0) } == [
                .milliseconds(200), .milliseconds(400), .milliseconds(800), .milliseconds(1600), .milliseconds(3200),
                .milliseconds(6400), .milliseconds(12800), .milliseconds(25600), .seconds(30), .seconds(30),
            ])
    }

    @Test("Full jitter: a pause lies anywhere from zero to the ceiling")
    func fullJitter() {
        let backoff = Backoff.standard
        #expect(backoff.delay(attempt: 3, unit: 0) == .zero)
        #expect(backoff.delay(attempt: 3, unit: 1) == backoff.ceiling(attempt: 3))
        #expect(backoff.delay(attempt: 3, unit: 0.5) == backoff.ceiling(attempt: 3) / 2)
        #expect(backoff.delay(attempt: 3, unit: 7) == backoff.ceiling(attempt: 3))
        #expect(backoff.delay(attempt: 1_000, unit: 1) == backoff.cap)
    }
}
