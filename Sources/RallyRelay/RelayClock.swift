public import Foundation

/// The relay's source of time, injected so tests control it.
public protocol RelayClock: Sendable {
    /// Wall-clock time: envelope timestamps, expiry, HTTP signature windows.
    var now: Date { get }
    /// Time since an arbitrary fixed origin that never goes backwards; rate
    /// limits use it so a wall-clock step cannot grant or withhold tokens.
    var monotonic: Duration { get }
}

public struct SystemRelayClock: RelayClock {
    private let origin = ContinuousClock.now

    public init() {}

    public var now: Date { Date() }
    public var monotonic: Duration { ContinuousClock.now - origin }
}

/// A clock that moves only when told to, for tests of rate limits and
/// expiry.
public final class ManualRelayClock: RelayClock, @unchecked Sendable {
    // NSLock rather than Synchronization.Mutex: the package still targets
    // macOS 14. Every access to the two fields goes through the lock.
    private let lock = NSLock()
    private var wall: Date
    private var elapsed: Duration = .zero

    public init(now: Date = Date(timeIntervalSince1970: 1_700_000_000)) {
        self.wall = now
    }

    public var now: Date { lock.withLock { wall } }
    public var monotonic: Duration { lock.withLock { elapsed } }

    public func advance(by duration: Duration) {
        lock.withLock {
            elapsed += duration
            wall += TimeInterval(duration.milliseconds) / 1000
        }
    }
}

extension RelayClock {
    var nowMilliseconds: Int64 { Int64((now.timeIntervalSince1970 * 1000).rounded(.down)) }
}
