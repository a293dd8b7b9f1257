import Foundation
import RallyCore
import RallyTestSupport
import Testing

/// The README's "Embedding the SDK" example, run as written against a real
/// relay, so the example keeps compiling and keeps telling the truth.
@Suite("The README's embedding example", .timeLimit(.minutes(10)))
struct EmbeddingExampleTests {
    @Test("Create a client, join with an invite link, observe the join, send to the group")
    func readmeExample() async throws {
        let relay = try await TestRelay.start()
        let homes = TemporaryDirectory("rally-readme")
        defer { homes.remove() }
        let friend = try await RallyClient.create(
            home: homes.path("friend"), relayURL: relay.url, displayName: "Friend", logger: TestLogger.quiet)
        let group = try await friend.createGroup(name: "Picnic")
        let link = try await friend.createInvite(in: group.groupID).webLink
        // The friend's device answers join requests while online.
        let answering = Task { try await friend.watch { _ in } }
        defer { answering.cancel() }

        // The example, with the test's home and relay.
        let home = homes.path("alice")
        let client = try await RallyClient.create(
            home: home, relayURL: relay.url, displayName: "Alice", logger: TestLogger.quiet)
        let attempt = try await client.startJoin(link)
        let phases = PhaseLog()
        let final = try await client.waitForJoin(requestID: attempt.requestID, timeout: .seconds(60)) { attempt in
            await phases.add(attempt.phase)
        }
        #expect(final.phase == .joined)
        #expect(await phases.phases.last == .joined)
        let groupID = try #require(final.groupID)
        let sent = try await client.sendGroupText("Hello!", to: groupID)
        #expect(sent.displayText == "Hello!")
        // Opening the home again finds the same identity.
        let reopened = try RallyClient.open(home: home, relayURL: relay.url, logger: TestLogger.quiet)
        #expect(reopened.inboxID == client.inboxID)

        answering.cancel()
        for user in [friend, client, reopened] { await user.disconnect() }
        await relay.stop()
    }
}

private actor PhaseLog {
    var phases: [JoinAttempt.Phase] = []
    func add(_ phase: JoinAttempt.Phase) { phases.append(phase) }
}
