/// A token bucket: `burst` tokens at most, refilled at `ratePerSecond`.
/// Time is passed in, so the bucket itself is a pure value.
struct TokenBucket: Sendable {
    enum Decision: Equatable, Sendable {
        case allowed
        case limited(retryAfterMilliseconds: UInt64)
    }

    let ratePerSecond: Double
    let burst: Double
    private var tokens: Double
    private var updatedAt: Duration

    init(ratePerSecond: Double, burst: Double, now: Duration) {
        self.ratePerSecond = ratePerSecond
        self.burst = max(1, burst)
        self.tokens = self.burst
        self.updatedAt = now
    }

    mutating func take(now: Duration) -> Decision {
        refill(now: now)
        if tokens >= 1 {
            tokens -= 1
            return .allowed
        }
        guard ratePerSecond > 0 else { return .limited(retryAfterMilliseconds: UInt64(Int32.max)) }
        let missing = 1 - tokens
        // The epsilon keeps floating-point dust from adding a millisecond.
        let waitMilliseconds = (missing / ratePerSecond * 1000 - 1e-6).rounded(.up)
        return .limited(retryAfterMilliseconds: max(1, UInt64(waitMilliseconds)))
    }

    private mutating func refill(now: Duration) {
        let elapsed = now - updatedAt
        guard elapsed > .zero else { return }
        tokens = min(burst, tokens + elapsed.timeInterval * ratePerSecond)
        updatedAt = now
    }
}
