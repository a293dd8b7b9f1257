public import Foundation

/// The client's sense of time: the wall clock its records and invites are
/// stamped with, and the pauses its retries wait. Injected, so tests and
/// the pure cores never read `Date()` behind the caller's back.
public struct ClientClock: Sendable {
    /// The current wall-clock time.
    public let now: @Sendable () -> Date
    /// Waits `duration` (throws when the task is cancelled).
    public let sleep: @Sendable (Duration) async throws -> Void
    /// Waits until `deadline` on this clock (throws when the task is
    /// cancelled). A timer armed for a deadline keeps it, however long the
    /// task takes to start sleeping.
    public let sleepUntil: @Sendable (Date) async throws -> Void

    public init(
        now: @escaping @Sendable () -> Date, sleep: @escaping @Sendable (Duration) async throws -> Void,
        sleepUntil: (@Sendable (Date) async throws -> Void)? = nil
    ) {
        self.now = now
        self.sleep = sleep
        self.sleepUntil =
            sleepUntil ?? { deadline in
                let remaining = deadline.timeIntervalSince(now())
                if remaining > 0 { try await sleep(.milliseconds(Int64((remaining * 1000).rounded(.up)))) }
            }
    }

    /// The system's clock and `Task.sleep`.
    public static let system = ClientClock(now: { Date() }, sleep: { try await Task.sleep(for: $0) })

    /// Milliseconds since 1970, as the wire and the store count time.
    public static func millis(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }
}

extension Date {
    /// The date `milliseconds` after 1970, as the wire and the store count
    /// time.
    init(milliseconds: Int64) { self.init(timeIntervalSince1970: Double(milliseconds) / 1000) }
}

/// The one retry pause of the SDK: exponential backoff with full jitter.
/// Attempt n (from 1) waits a uniformly random time in
/// `0 ... min(cap, base · 2^(n-1))`, so clients that failed together do not
/// come back together.
public struct Backoff: Sendable, Equatable {
    public var base: Duration
    public var cap: Duration

    public init(base: Duration = .milliseconds(200), cap: Duration = .seconds(30)) {
        self.base = base
        self.cap = cap
    }

    /// The SDK's default: 200 ms doubling to at most 30 s.
    public static let standard = Backoff()

    /// The longest pause attempt `attempt` may wait.
    public func ceiling(attempt: Int) -> Duration {
        let doublings = min(max(attempt - 1, 0), 30)
        let grown = base * Double(1 << doublings)
        return min(grown, cap)
    }

    /// The pause before attempt `attempt`, for a uniform `unit` in 0...1.
    public func delay(attempt: Int, unit: Double) -> Duration {
        ceiling(attempt: attempt) * min(max(unit, 0), 1)
    }

    /// The pause before attempt `attempt`, with system randomness.
    public func delay(attempt: Int) -> Duration {
        delay(attempt: attempt, unit: Double.random(in: 0...1))
    }
}
