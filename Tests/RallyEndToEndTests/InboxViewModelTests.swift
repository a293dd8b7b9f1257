import Foundation
import RallyCrypto
import RallyTestSupport
import RallyViewModels
import Testing

@testable import RallyCore

@Suite("InboxViewModel against a real relay", .timeLimit(.minutes(10)))
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

    @Test("The direct-message inbox shows direct messages only, not the group messages stored beside them")
    func inboxShowsOnlyDirectMessages() async throws {
        let world = try await GroupWorld.start()
        let alice = try await world.user("alice")
        let bob = try await world.user("bob")
        let group = try await alice.createGroup(name: "Picnic")
        _ = try await alice.addMember(bob.inboxID, to: group.groupID)
        _ = try await alice.sendGroupText("to the group", to: group.groupID)
        _ = try await alice.sendText("just to bob", to: bob.inboxID)
        _ = try await bob.syncInbox()
        _ = try await bob.syncGroup(group.groupID)
        #expect(try bob.store.messages(conversation: group.groupID).map(\.displayText) == ["to the group"])

        let model = InboxViewModel(client: bob)
        await model.refresh()
        // The welcome is a direct message too; the group's message is not.
        #expect(!model.messages.map(\.displayText).contains("to the group"))
        #expect(model.messages.map(\.displayText).contains("just to bob"))
        #expect(model.messages.allSatisfy { $0.topic.hasPrefix("inbox/") })
        await world.stop([alice, bob])
    }
}
