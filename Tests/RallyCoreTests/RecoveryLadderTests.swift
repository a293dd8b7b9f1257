import Testing

@testable import RallyCore

@Suite("RecoveryLadder")
struct RecoveryLadderTests {
    static let backoff = Backoff(base: .milliseconds(200), cap: .seconds(30))

    @Test("Rungs come lightest first and repeat; the pause's ceiling doubles up to the cap")
    func order() {
        var ladder = RecoveryLadder(backoff: Self.backoff)
        let steps = (0..<9).map { _ in ladder.next(unit: 1) }
        #expect(
            steps.map(\.rung) == [
                .ping, .reconnect, .reauthenticate, .httpFallback, .ping, .reconnect, .reauthenticate, .httpFallback,
                .ping,
            ])
        #expect(steps.map(\.attempt) == Array(1...9))
        #expect(steps.map(\.delay) == (1...9).map { Self.backoff.ceiling(attempt: $0) })
        #expect(steps[7].delay == .milliseconds(25_600))
        // 200 ms · 2^8 = 51.2 s is over the cap.
        #expect(steps[8].delay == .seconds(30))
        var late = RecoveryLadder(backoff: Self.backoff)
        for _ in 0..<40 { _ = late.next(unit: 1) }
        #expect(late.next(unit: 1).delay == .seconds(30))
    }

    @Test("Full jitter: the unit draw scales the pause from zero to the ceiling")
    func jitter() {
        var zero = RecoveryLadder(backoff: Self.backoff)
        #expect(zero.next(unit: 0).delay == .zero)
        var half = RecoveryLadder(backoff: Self.backoff)
        _ = half.next(unit: 0)
        #expect(half.next(unit: 0.5).delay == .milliseconds(200))
    }

    @Test("A recovery starts the next trouble from the first rung and the smallest pause")
    func recovered() {
        var ladder = RecoveryLadder(backoff: Self.backoff)
        for _ in 0..<6 { _ = ladder.next(unit: 1) }
        ladder.recovered()
        #expect(ladder.attempts == 0)
        let step = ladder.next(unit: 1)
        #expect(step.rung == .ping && step.attempt == 1 && step.delay == .milliseconds(200))
    }

    @Test("A rung that cannot be tried is skipped at the same attempt and pause")
    func skipping() {
        var ladder = RecoveryLadder(backoff: Self.backoff)
        let ping = ladder.next(unit: 1)
        #expect(ping.rung == .ping)
        let skipped = ladder.skipping(ping)
        #expect(skipped == RecoveryLadder.Step(attempt: 1, rung: .reconnect, delay: ping.delay))
        #expect(ladder.next(unit: 1).rung == .reauthenticate)
        #expect(ladder.attempts == 2)
    }

    @Test("SHUTTING_DOWN skips the ping: reconnect after a pause within the window, then on up the ladder")
    func shutdownNotice() {
        var ladder = RecoveryLadder(backoff: Self.backoff)
        let step = ladder.afterShutdownNotice(window: .seconds(2), unit: 0.25)
        #expect(step.rung == .reconnect && step.delay == .milliseconds(500))
        #expect(ladder.afterShutdownNotice(window: .seconds(2), unit: 7).delay == .seconds(2))
        #expect(ladder.next(unit: 1).rung == .reauthenticate)
    }

    @Test("Without a fallback transport the ladder leaves out the HTTP rung; an empty ladder reconnects")
    func rungs() {
        var noFallback = RecoveryLadder(backoff: Self.backoff, rungs: [.ping, .reconnect, .reauthenticate])
        #expect((0..<4).map { _ in noFallback.next(unit: 0).rung } == [.ping, .reconnect, .reauthenticate, .ping])
        var empty = RecoveryLadder(backoff: Self.backoff, rungs: [])
        #expect(empty.next(unit: 0).rung == .reconnect)
    }
}
