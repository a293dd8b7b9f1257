import Foundation
import RallyCore
import RallyTestSupport
import RallyViewModels
import Testing

/// The call screen's model on real sessions: a real relay, Alice behind the
/// fault proxy with her timers on a manual clock.
@Suite("CallViewModel on a real relay", .timeLimit(.minutes(1)))
@MainActor
struct CallViewModelTests {
    /// Waits until the model (updated on the main actor) shows `condition`.
    func until(_ model: CallViewModel, _ condition: (CallViewModel) -> Bool) async {
        while !condition(model) { await Task.yield() }
    }

    @Test("Waiting, in the call, the badge after 800 ms, retrying with 'Leave call' and a haptic, Leave goes home")
    func outageAndLeave() async throws {
        let network = try await CallNetwork.start()
        let room = try await network.room()
        let alice = network.alice(room)
        let bob = network.bob(room)
        let aliceWatch = await CallWatch(alice)
        let model = CallViewModel(session: alice)
        let showing = Task { await model.start() }
        await until(model) { $0.phase == .waiting }
        #expect(!model.indicatorVisible && !model.goesHome && model.homeMessage == nil)
        await bob.start()
        await until(model) { $0.phase == .inCall }
        #expect(model.status == .connected && !model.indicatorVisible)

        await cut(network, aliceWatch)
        network.clock.advance(by: .milliseconds(800))
        await until(model) { $0.indicatorVisible }
        #expect(model.text == "Reconnecting…" && model.subText == nil && !model.showsLeave)
        network.clock.advance(by: .milliseconds(9_200))
        await until(model) { $0.status == .retrying }
        #expect(model.subText == "Taking longer than usual…" && model.showsLeave && model.hapticCount == 1)
        #expect(model.phase == .inCall)

        await model.leave()
        await until(model) { $0.goesHome }
        #expect(model.phase == .idle && model.homeMessage == "You left the call." && !model.indicatorVisible)
        showing.cancel()
        await bob.leave()
        await network.stop()
    }

    @Test("The other person leaves: home, saying so; a call that does not exist: home, saying why")
    func peerLeftAndRefused() async throws {
        let network = try await CallNetwork.start()
        let room = try await network.room()
        let model = CallViewModel(session: network.alice(room))
        let bob = network.bob(room)
        let showing = Task { await model.start() }
        await until(model) { $0.phase == .waiting }
        await bob.start()
        await until(model) { $0.phase == .inCall }
        await bob.leave()
        await until(model) { $0.goesHome }
        #expect(model.phase == .idle && model.homeMessage == CallEnd.peerLeft.message && model.error == nil)
        showing.cancel()

        let missing = CallLink.fresh(relayURL: network.relay.relay.boundURL, room: String(repeating: "f", count: 32))
        let lost = CallViewModel(session: CallSession(link: missing, media: ScriptedMediaEngine()))
        await lost.start()
        #expect(lost.goesHome && lost.phase == .error && lost.error == .roomNotFound)
        #expect(lost.homeMessage == CallError.roomNotFound.description)
        await network.stop()
    }
}
