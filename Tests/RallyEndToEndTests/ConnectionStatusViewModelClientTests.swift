import Foundation
import RallyCore
import RallyTestSupport
import RallyViewModels
import Testing

/// The view model on a real client: a real relay behind the fault proxy,
/// the status timers on a manual clock.
@Suite("ConnectionStatusViewModel on a real client", .timeLimit(.minutes(1)))
@MainActor
struct ConnectionStatusViewModelClientTests {
    @Test("It shows what the client's connection goes through, and Leave ends recovery")
    func followsTheClient() async throws {
        let network = try await FaultyNetwork.start()
        let bob = try await network.client("bob")
        let model = await ConnectionStatusViewModel(client: bob)
        let status = await StatusRecorder(bob)
        let showing = Task { await model.start() }
        let follower = InboxFollower(bob)
        await status.wait { $0.status == .connected }

        network.proxy.setMode(.refuse)
        network.proxy.resetAll()
        await network.statusClock.sleepers()
        network.statusClock.advance(by: .seconds(11))
        await status.wait { $0.status == .retrying }
        // The model applies the same updates on the main actor: wait for
        // it through its own observation of the last one.
        while model.status != .retrying { await Task.yield() }
        #expect(model.indicatorVisible && model.showsLeave)
        #expect(model.text == "Reconnecting…" && model.subText == "Taking longer than usual…")
        #expect(model.hapticCount == 1)

        await model.leave()
        await status.wait { $0.status == .idle }
        while model.status != .idle { await Task.yield() }
        #expect(!model.indicatorVisible && !model.showsLeave)
        guard case .success = await follower.task.value else {
            Issue.record("the follower ended with an error after Leave")
            return
        }

        showing.cancel()
        status.stop()
        await network.stop()
    }
}
