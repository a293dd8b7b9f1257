import Foundation
import Logging
import RallyCrypto

/// What the push side did, for tests to wait on and for the log.
enum PushEvent: Sendable, Equatable {
    case scheduled(inbox: String)
    /// Covered by a notification already waiting (or dropped past the
    /// waiting limit).
    case coalesced(inbox: String)
    case finished(PushSchedule.Finished)
}

/// The push side's shell (ADR 0020): takes "an envelope that asks for a
/// push was stored" from the writer without ever making it wait, keeps
/// the registered inboxes in memory, runs ``PushSchedule`` on the relay's
/// clock and makes the calls through a ``PushDeliverer``.
actor PushDispatcher {
    private var schedule: PushSchedule
    private var registered: Set<String> = []
    private let targets: any PushTargetStore
    private let deliverer: any PushDeliverer
    private let clock: any RelayClock
    private let metrics: RelayMetrics
    private let logger: Logger
    private nonisolated let arrivals: AsyncStream<String>.Continuation
    private let arrivalStream: AsyncStream<String>
    private nonisolated let eventSink: AsyncStream<PushEvent>.Continuation
    /// Everything the dispatcher does, in order (for tests; nobody need
    /// read it: it keeps only the newest events).
    nonisolated let events: AsyncStream<PushEvent>
    private var timer: Task<Void, Never>?
    private var timerDeadline: Duration?
    private var calls: [UInt64: Task<Void, Never>] = [:]
    private var nextCall: UInt64 = 0

    init(
        targets: any PushTargetStore, deliverer: any PushDeliverer, clock: any RelayClock,
        limits: PushSchedule.Limits, metrics: RelayMetrics, logger: Logger
    ) {
        schedule = PushSchedule(limits: limits) {
            Data((0..<16).map { _ in UInt8.random(in: 0...255) }).base64URLEncoded()
        }
        self.targets = targets
        self.deliverer = deliverer
        self.clock = clock
        self.metrics = metrics
        self.logger = logger
        // Bounded: past it the newest arrivals are kept and older ones
        // dropped, which loses nothing a waiting notification covers.
        (arrivalStream, arrivals) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(limits.maxWaiting))
        (events, eventSink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1024))
    }

    /// An envelope for `inbox` that asks for a push was stored. Never
    /// waits: the writer calls it after each commit.
    nonisolated func stored(inbox: String) {
        arrivals.yield(inbox)
    }

    /// Reads the registered inboxes, then handles arrivals until cancelled.
    func run() async {
        await reloadTargets()
        for await inbox in arrivalStream {
            arrive(inbox)
        }
    }

    /// Reads the inboxes with a target from the store again: at start, and
    /// when another node's announcements may have been missed (ADR 0021).
    func reloadTargets() async {
        do {
            registered = Set(try await targets.registeredInboxes())
        } catch {
            logger.error("reading push targets failed", metadata: ["error": "\(error)"])
        }
    }

    /// Stops taking arrivals, lets the calls in flight end, closes the client.
    func shutdown() async {
        arrivals.finish()
        timer?.cancel()
        timer = nil
        for call in calls.values { call.cancel() }
        for call in calls.values { await call.value }
        calls = [:]
        await deliverer.shutdown()
        eventSink.finish()
    }

    func closeStore() async throws {
        try await targets.close()
    }

    func register(inbox: String, url: URL) async throws {
        try await targets.register(inbox: inbox, url: url, nowMilliseconds: clock.nowMilliseconds)
        registered.insert(inbox)
    }

    @discardableResult
    func unregister(inbox: String) async throws -> Bool {
        registered.remove(inbox)
        schedule.forget(inbox: inbox)
        return try await targets.unregister(inbox: inbox)
    }

    /// Another relay node registered a target for `inbox` (several nodes
    /// share one store, ADR 0021).
    func noteRegistered(inbox: String) {
        registered.insert(inbox)
    }

    func isRegistered(inbox: String) -> Bool { registered.contains(inbox) }

    /// Another relay node removed `inbox`'s target.
    func noteUnregistered(inbox: String) {
        registered.remove(inbox)
        schedule.forget(inbox: inbox)
    }

    func target(inbox: String) async throws -> URL? {
        try await targets.target(inbox: inbox)
    }

    private func arrive(_ inbox: String) {
        guard registered.contains(inbox) else { return }
        if schedule.arrived(inbox: inbox, now: clock.monotonic) {
            eventSink.yield(.scheduled(inbox: inbox))
        } else {
            eventSink.yield(.coalesced(inbox: inbox))
        }
        pump()
    }

    /// Starts every call that is due, then sleeps until the next one.
    private func pump() {
        for call in schedule.due(now: clock.monotonic) { start(call) }
        armTimer()
    }

    private func start(_ call: PushSchedule.Call) {
        nextCall += 1
        let id = nextCall
        let targets = targets
        let deliverer = deliverer
        calls[id] = Task {
            let outcome: PushSchedule.Outcome
            if let url = try? await targets.target(inbox: call.inbox) {
                outcome = await deliverer.deliver(call, to: url)
            } else {
                // Unregistered meanwhile.
                outcome = .gone
            }
            await self.finish(call, outcome, id: id)
        }
    }

    private func finish(_ call: PushSchedule.Call, _ outcome: PushSchedule.Outcome, id: UInt64) async {
        calls[id] = nil
        let finished = schedule.finished(call, outcome, now: clock.monotonic)
        switch finished {
        case .delivered: metrics.pushes.increment()
        case .retryScheduled: metrics.pushRetries.increment()
        case .gaveUp, .refused:
            metrics.pushesDropped.increment()
            logger.info("a push was dropped", metadata: ["outcome": "\(finished)"])
        case .targetGone(let inbox):
            metrics.pushTargetsGone.increment()
            registered.remove(inbox)
            do {
                try await targets.unregister(inbox: inbox)
            } catch {
                logger.error("removing a gone push target failed", metadata: ["error": "\(error)"])
            }
        case .stale: break
        }
        eventSink.yield(.finished(finished))
        pump()
    }

    private func armTimer() {
        guard let next = schedule.nextDue else {
            timer?.cancel()
            timer = nil
            timerDeadline = nil
            return
        }
        if timer != nil, timerDeadline == next { return }
        timer?.cancel()
        timerDeadline = next
        let clock = clock
        timer = Task {
            do {
                try await clock.sleep(until: next)
            } catch {
                return
            }
            self.timerFired(next)
        }
    }

    private func timerFired(_ deadline: Duration) {
        guard timerDeadline == deadline else { return }
        timer = nil
        timerDeadline = nil
        pump()
    }
}
