/// How the relay pushes: retries, rate, concurrency, and which targets it
/// accepts. The defaults are the production values.
public struct PushLimits: Sendable, Equatable {
    /// Calls per notification before it is given up.
    public var maxAttempts = 6
    /// The pause before the first retry; each later one doubles.
    public var firstRetry: Duration = .seconds(1)
    public var maxRetry: Duration = .seconds(300)
    /// Least time between two pushes to one inbox.
    public var minInterval: Duration = .seconds(2)
    /// Calls in flight at once, across inboxes.
    public var maxInFlight = 16
    /// How long one call may take, connecting included, before it counts
    /// as failed.
    public var callTimeout: Duration = .seconds(10)
    /// Inboxes with a notification waiting; past it, new ones are dropped
    /// (and counted) rather than held.
    public var maxWaiting = 100_000
    /// Longest target URL accepted.
    public var maxTargetURLBytes = 2048
    /// Whether plain `http` targets are accepted (tests, local
    /// development); production targets are `https`.
    public var allowsInsecureTargets = false
    /// Whether targets on loopback, private and link-local addresses given
    /// as IP literals are accepted (tests); otherwise a registration
    /// cannot point the relay at its own network.
    public var allowsPrivateTargets = false

    public init() {}

    public static let `default` = PushLimits()
}

/// When the relay calls an inbox's push target, as a pure state machine
/// over monotonic times the caller passes in (ADR 0020).
///
/// - One notification per inbox waits at a time: envelopes that arrive
///   while one waits are covered by it (the device reads its whole inbox
///   when woken), so a burst of messages is one push.
/// - Per inbox, pushes are at least `minInterval` apart: the rate limit
///   delays and coalesces, it never loses the last wake-up.
/// - A failed call is retried with doubling pauses up to `maxAttempts`;
///   a target that says it is gone is dropped.
/// - Every notification has an id that stays the same across its retries,
///   so a receiver that got a call whose answer was lost can tell.
struct PushSchedule {
    typealias Limits = PushLimits

    /// One call to make.
    struct Call: Equatable, Sendable {
        let inbox: String
        let notificationID: String
        /// 1 for the first call of a notification.
        let attempt: Int
    }

    /// How a call ended, as the deliverer saw it.
    enum Outcome: Equatable, Sendable {
        case delivered
        /// Worth another try (a timeout, a refused connection, 5xx, 429),
        /// after at least `retryAfter` when the receiver said so.
        case failed(retryAfter: Duration?)
        /// The target does not exist any more (404, 410): unregister it.
        case gone
        /// Refused for good (another 4xx): this notification is dropped.
        case refused
    }

    /// What finishing a call did, for the shell to act on and report.
    enum Finished: Equatable, Sendable {
        case delivered(Call)
        case retryScheduled(Call, at: Duration)
        case gaveUp(Call)
        case targetGone(inbox: String)
        case refused(Call)
        /// A call for a notification the schedule no longer holds (its
        /// target was removed meanwhile).
        case stale(Call)
    }

    private struct Waiting {
        var notificationID: String
        var attempt: Int
        var dueAt: Duration
        var inFlight: Bool
        /// An envelope arrived while this notification was in flight: the
        /// call may have woken the device before it was stored, so another
        /// push follows.
        var arrivedDuringCall: Bool
    }

    let limits: Limits
    private var waiting: [String: Waiting] = [:]
    /// When each inbox was last pushed, kept for `minInterval`.
    private var lastPushed: [String: Duration] = [:]
    private var inFlight = 0
    private let newID: () -> String

    init(limits: Limits = .default, newID: @escaping () -> String) {
        self.limits = limits
        self.newID = newID
    }

    var waitingCount: Int { waiting.count }
    var inFlightCount: Int { inFlight }

    /// An envelope for `inbox` that asks for a push was stored. Returns
    /// false when it was covered by a notification already waiting, or
    /// dropped because too many inboxes wait.
    mutating func arrived(inbox: String, now: Duration) -> Bool {
        if var entry = waiting[inbox] {
            if entry.inFlight {
                entry.arrivedDuringCall = true
                waiting[inbox] = entry
            }
            return false
        }
        guard waiting.count < limits.maxWaiting else { return false }
        waiting[inbox] = Waiting(
            notificationID: newID(), attempt: 1, dueAt: earliestPush(inbox, now: now), inFlight: false,
            arrivedDuringCall: false)
        return true
    }

    /// The calls due at `now`, within the in-flight limit; each is marked
    /// in flight until `finished`.
    mutating func due(now: Duration) -> [Call] {
        guard inFlight < limits.maxInFlight else { return [] }
        let ready = waiting.filter { !$0.value.inFlight && $0.value.dueAt <= now }
            .sorted { ($0.value.dueAt, $0.key) < ($1.value.dueAt, $1.key) }
            .prefix(limits.maxInFlight - inFlight)
        return ready.map { inbox, entry in
            waiting[inbox]?.inFlight = true
            inFlight += 1
            return Call(inbox: inbox, notificationID: entry.notificationID, attempt: entry.attempt)
        }
    }

    /// The earliest time a waiting notification falls due, if any.
    var nextDue: Duration? {
        waiting.values.lazy.filter { !$0.inFlight }.map(\.dueAt).min()
    }

    mutating func finished(_ call: Call, _ outcome: Outcome, now: Duration) -> Finished {
        guard var entry = waiting[call.inbox], entry.inFlight, entry.notificationID == call.notificationID else {
            return .stale(call)
        }
        inFlight -= 1
        entry.inFlight = false
        let again = entry.arrivedDuringCall
        switch outcome {
        case .delivered:
            lastPushed[call.inbox] = now
            waiting[call.inbox] = nil
            if again { _ = arrived(inbox: call.inbox, now: now) }
            pruneLastPushed(now: now)
            return .delivered(call)
        case .failed(let retryAfter):
            guard entry.attempt < limits.maxAttempts else {
                waiting[call.inbox] = nil
                if again { _ = arrived(inbox: call.inbox, now: now) }
                return .gaveUp(call)
            }
            let pause = max(backoff(afterAttempt: entry.attempt), min(retryAfter ?? .zero, limits.maxRetry))
            entry.attempt += 1
            entry.dueAt = now + pause
            // The retry covers what arrived meanwhile.
            entry.arrivedDuringCall = false
            waiting[call.inbox] = entry
            return .retryScheduled(
                Call(inbox: call.inbox, notificationID: entry.notificationID, attempt: entry.attempt), at: entry.dueAt)
        case .gone:
            waiting[call.inbox] = nil
            lastPushed[call.inbox] = nil
            return .targetGone(inbox: call.inbox)
        case .refused:
            waiting[call.inbox] = nil
            if again { _ = arrived(inbox: call.inbox, now: now) }
            return .refused(call)
        }
    }

    /// Forgets an inbox whose target was removed: nothing more is called.
    mutating func forget(inbox: String) {
        if let entry = waiting[inbox], entry.inFlight {
            // Its call finishes on its own; finished() then finds nothing.
            inFlight -= 1
        }
        waiting[inbox] = nil
        lastPushed[inbox] = nil
    }

    /// The pause after the `attempt`th call failed: `firstRetry` doubled
    /// per earlier failure, at most `maxRetry`.
    func backoff(afterAttempt attempt: Int) -> Duration {
        var pause = limits.firstRetry
        for _ in 1..<max(1, attempt) where pause < limits.maxRetry { pause = pause * 2 }
        return min(pause, limits.maxRetry)
    }

    private func earliestPush(_ inbox: String, now: Duration) -> Duration {
        guard let last = lastPushed[inbox] else { return now }
        return max(now, last + limits.minInterval)
    }

    private mutating func pruneLastPushed(now: Duration) {
        // Amortized: only when the map has grown past the waiting limit.
        guard lastPushed.count > limits.maxWaiting else { return }
        lastPushed = lastPushed.filter { now - $0.value < limits.minInterval }
    }
}
