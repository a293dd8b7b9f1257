import Foundation
import RallyCore
import RallyTestSupport
import RallyTesting
import Testing

/// An app and its extension (or `rally group read --follow` and `rally
/// group send`) on one home: a live follower whose entry another process
/// stored first still shows it. Alice's follower reaches the relay through
/// a proxy that is stalled while the other process, straight to the relay,
/// stores the entry and moves the home's cursor past it; the follower then
/// receives an entry at or below the cursor.
@Suite("Two processes on one home: a live follower shows what the other stored", .timeLimit(.minutes(3)))
struct SharedHomeFollowTests {
    @Test("a group message the other process sent and read back is shown to the follower, once")
    func groupMessageStoredElsewhere() async throws {
        // Pings wait out the stall instead of dropping the link.
        let network = try await FaultyNetwork.start(heartbeatTimeout: .seconds(600))
        let alice = try await network.client("alice")
        let groupID = try await alice.createGroup(name: "Picnic").groupID
        let extensionProcess = try RallyClient.open(
            home: network.homes.path("alice"), relayURL: network.relay.relay.boundURL, logger: TestLogger.quiet)
        let status = await StatusRecorder(alice)
        let shown = Arrivals<String>()
        let following = Task {
            try await alice.followGroup(groupID, untilCaughtUp: false) { event in
                if case .message(let message) = event { await shown.append(message.displayText) }
            }
        }
        await status.wait { $0.status == .connected }

        network.proxy.setMode(.stall)
        let sent = try await extensionProcess.sendGroupText("from the extension", to: groupID)
        // Read back from the log: the home's cursor is past it now.
        #expect(sent.seq != nil)
        network.proxy.setMode(.pass)
        // Sent after the stall, so it arrives after the first: both once.
        _ = try await extensionProcess.sendGroupText("and another", to: groupID)
        await shown.wait { $0.count >= 2 }
        #expect(await shown.values == ["from the extension", "and another"])

        following.cancel()
        status.stop()
        await alice.disconnect()
        await extensionProcess.disconnect()
        await network.stop()
    }

    @Test("a direct message the other process synced first is shown to the inbox follower, once")
    func directMessageStoredElsewhere() async throws {
        let network = try await FaultyNetwork.start(heartbeatTimeout: .seconds(600))
        let (bob, status, follower) = try await network.following("bob")
        let alice = try await network.directClient("alice")
        let extensionProcess = try RallyClient.open(
            home: network.homes.path("bob"), relayURL: network.relay.relay.boundURL, logger: TestLogger.quiet)

        network.proxy.setMode(.stall)
        _ = try await alice.sendText("while the app was frozen", to: bob.inboxID)
        let synced = try await extensionProcess.syncInbox()
        #expect(synced.received.map(\.displayText) == ["while the app was frozen"])
        network.proxy.setMode(.pass)
        _ = try await alice.sendText("and after", to: bob.inboxID)
        let received = await follower.wait(forCount: 2)
        #expect(received.map(\.displayText) == ["while the app was frozen", "and after"])

        await follower.stop()
        status.stop()
        await alice.disconnect()
        await extensionProcess.disconnect()
        await network.stop()
    }
}
