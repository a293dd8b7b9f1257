import Foundation
import RallyTestSupport
import Testing

@testable import RallyCore

/// Clients behind a frozen or a slow network rather than a dead one: the
/// fault proxy's stall (it holds bytes, then delivers them) and throttle
/// modes, with a real relay behind it (see ``FaultyNetwork``).
@Suite("Slow and stalled networks", .timeLimit(.minutes(2)))
struct SlowNetworkTests {
    static func texts(_ messages: [StoredMessage]) -> [String] { messages.map(\.displayText) }

    @Test(
        "A stalled network is noticed by missed pings; after it thaws the follower recovers and gets what was sent meanwhile, once, in order"
    )
    func stalledNetwork() async throws {
        let network = try await FaultyNetwork.start()
        let alice = try await network.directClient("alice")
        let bob = try await network.client("bob")
        let status = await StatusRecorder(bob)
        let follower = InboxFollower(bob)
        await status.wait { $0.status == .connected }
        _ = try await alice.sendText("before", to: bob.inboxID)
        _ = await follower.wait(forCount: 1)

        // Nothing crosses, nothing fails: only the unanswered ping (sent
        // within the 1 s interval, given up after 2 s) tells the client.
        network.proxy.setMode(.stall)
        await status.wait { $0.status == .recovering }
        for index in 0..<10 { _ = try await alice.sendText("during \(index)", to: bob.inboxID) }
        #expect(network.proxy.statistics.delayedBytesToUpstream > 0)

        let catchUps = await follower.caughtUp.values.count
        network.proxy.setMode(.pass)
        await status.wait { $0.status == .connected }
        await follower.caughtUp.wait { $0.count > catchUps }
        let received = await follower.wait(forCount: 11)
        #expect(Self.texts(received) == ["before"] + (0..<10).map { "during \($0)" })
        // Exactly once: nothing more than what was sent is stored.
        #expect(try await bob.directMessageHistory().filter { !$0.outgoing }.count == 11)
        // The held bytes were delivered late, not lost.
        let statistics = network.proxy.statistics
        #expect(statistics.droppedBytesToUpstream == 0)
        #expect(statistics.droppedBytesToClients == 0)

        await follower.stop()
        status.stop()
        await network.stop()
    }

    @Test(
        "Under a 16 KiB/s throttle a follower gets 50 messages of ~1 KiB once, in order, and the status never leaves connected"
    )
    func throttledNetwork() async throws {
        let network = try await FaultyNetwork.start(heartbeatTimeout: .seconds(30))
        network.proxy.setMode(.throttle(bytesPerSecond: 16_384))
        let alice = try await network.directClient("alice")
        let bob = try await network.client("bob")
        let status = await StatusRecorder(bob)
        let follower = InboxFollower(bob)
        await status.wait { $0.status == .connected }

        // Random letters, so compression keeps them about 1 KiB.
        var generator = SeededGenerator(seed: 16_384)
        let letters = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        // The first is about 3 KiB, more than the throttle's bucket holds
        // (a tenth of a second): it is delayed however slowly the rest
        // arrive on a busy machine.
        let sent = (0..<50).map { index in
            "\(index) "
                + String((0..<(index == 0 ? 4000 : 1000)).map { _ in letters.randomElement(using: &generator)! })
        }
        // In batches of five (about 7 KiB on the wire, under half a second
        // of the link), each received before the next is sent: a pong
        // queues behind whatever the relay sent before it, as on a real
        // slow link, and the heartbeat here gives a pong 30 s, so neither
        // the throttle nor a machine busy with other tests passes for a
        // dead link.
        for batch in stride(from: 0, to: 50, by: 5) {
            for text in sent[batch..<(batch + 5)] { _ = try await alice.sendText(text, to: bob.inboxID) }
            _ = await follower.wait(forCount: batch + 5)
        }
        let received = await follower.wait(forCount: 50)
        #expect(Self.texts(received) == sent)
        #expect(try await bob.directMessageHistory().filter { !$0.outgoing }.count == 50)

        // The link was slow, not broken: no missed ping, no indicator. (The
        // indicator needs 800 ms of status time, a manual clock here, so
        // "never recovering" is the check with teeth.)
        let shown = await status.updates.map(\.presentation)
        #expect(shown.map(\.status) == [.idle, .connected])
        #expect(shown.allSatisfy { !$0.indicatorVisible })
        #expect(await bob.connectionReport().totalAttempts == 0)
        let statistics = network.proxy.statistics
        #expect(statistics.delayedBytesToClients > 0)
        #expect(statistics.forwardedBytesToClients > 50 * 1000)
        #expect(statistics.droppedBytesToClients == 0)

        await follower.stop()
        status.stop()
        await network.stop()
    }
}
