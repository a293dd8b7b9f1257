import Foundation
import RallyCore
import RallyCrypto
import RallyTestSupport
import RallyViewModels
import Testing

@Suite("InboxViewModel against a real relay")
@MainActor
struct InboxViewModelTests {
    @Test("refresh shows received messages; send appends; a failure becomes a readable error")
    func flow() async throws {
        let relay = try await TestRelay.start()
        let homes = TemporaryDirectory("rally-vm")
        defer { homes.remove() }
        let alice = try await RallyClient.create(
            home: homes.path("alice"), relayURL: relay.url, displayName: "Alice", logger: TestLogger.quiet)
        let bob = try await RallyClient.create(
            home: homes.path("bob"), relayURL: relay.url, displayName: "Bob", logger: TestLogger.quiet)
        _ = try await alice.sendText("for the view model", to: bob.inboxID)

        let model = InboxViewModel(client: bob)
        #expect(model.messages.isEmpty)
        await model.refresh()
        #expect(model.messages.map(\.displayText) == ["for the view model"])
        #expect(model.errorMessage == nil)
        #expect(!model.isSyncing)

        await model.send("reply", to: alice.inboxID)
        #expect(model.messages.map(\.displayText) == ["for the view model", "reply"])

        let stranger = Identity(displayName: "unpublished").inboxID
        await model.send("hello?", to: stranger)
        #expect(model.errorMessage?.contains("has no key bundle for \(stranger)") == true)
        #expect(model.messages.count == 2)

        await alice.disconnect()
        await bob.disconnect()
        await relay.stop()
    }
}
