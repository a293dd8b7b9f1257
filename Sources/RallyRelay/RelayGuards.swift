import Foundation

/// Token buckets keyed by an IP address or an identity, shared by every
/// connection and HTTP request. Idle keys (whose bucket would be full
/// again) are forgotten when the table grows, so its size stays bounded by
/// the keys active within one refill period.
final class KeyedRateLimiter: @unchecked Sendable {
    private let lock = NSLock()
    private let ratePerSecond: Double
    private let burst: Double
    private let maxKeys: Int
    // Guarded by `lock`.
    private var buckets: [String: (bucket: TokenBucket, lastUse: Duration)] = [:]

    init(ratePerSecond: Double, burst: Double, maxKeys: Int = 100_000) {
        self.ratePerSecond = ratePerSecond
        self.burst = burst
        self.maxKeys = maxKeys
    }

    func take(_ key: String, now: Duration) -> TokenBucket.Decision {
        lock.withLock {
            if buckets.count >= maxKeys, buckets[key] == nil { forgetIdle(now: now) }
            var entry =
                buckets[key] ?? (TokenBucket(ratePerSecond: ratePerSecond, burst: burst, now: now), now)
            let decision = entry.bucket.take(now: now)
            entry.lastUse = now
            buckets[key] = entry
            return decision
        }
    }

    private func forgetIdle(now: Duration) {
        let refill: Duration = ratePerSecond > 0 ? .seconds(burst / ratePerSecond) : .seconds(3600)
        buckets = buckets.filter { now - $0.value.lastUse < refill }
    }
}

/// Counts open WebSocket connections, in all and per IP address.
final class ConnectionTracker: @unchecked Sendable {
    private let lock = NSLock()
    private let maxTotal: Int
    private let maxPerIP: Int
    // Guarded by `lock`.
    private var total = 0
    private var perIP: [String: Int] = [:]

    init(maxTotal: Int, maxPerIP: Int) {
        self.maxTotal = maxTotal
        self.maxPerIP = maxPerIP
    }

    enum Admission: Equatable {
        case admitted
        case refused(String)
    }

    /// Counts a new connection, or refuses it. Every admitted connection
    /// must be `release`d.
    func admit(ip: String) -> Admission {
        lock.withLock {
            if total >= maxTotal { return .refused("the relay has \(maxTotal) connections open") }
            if perIP[ip, default: 0] >= maxPerIP {
                return .refused("this address has \(maxPerIP) connections open")
            }
            total += 1
            perIP[ip, default: 0] += 1
            return .admitted
        }
    }

    func release(ip: String) {
        lock.withLock {
            total -= 1
            let left = perIP[ip, default: 1] - 1
            perIP[ip] = left > 0 ? left : nil
        }
    }

    var openCount: Int { lock.withLock { total } }
}

/// HTTP signature nonces seen within the signature window: a request signed
/// once is accepted once. Bounded: when full of live nonces it refuses new
/// ones (fail closed) rather than forget one that could be replayed.
final class NonceCache: @unchecked Sendable {
    private let lock = NSLock()
    private let capacity: Int
    private let lifetimeMilliseconds: Int64
    // Guarded by `lock`: nonce -> the time after which it cannot verify.
    private var seen: [Data: Int64] = [:]

    init(capacity: Int, lifetimeMilliseconds: Int64) {
        self.capacity = max(1, capacity)
        self.lifetimeMilliseconds = lifetimeMilliseconds
    }

    enum Outcome: Equatable {
        case fresh
        case replayed
        case full
    }

    /// Remembers a nonce signed at `signedAt` (it verifies until `signedAt`
    /// + the window).
    func remember(_ nonce: Data, signedAt: Int64, now: Int64) -> Outcome {
        lock.withLock {
            if let expiry = seen[nonce], expiry >= now { return .replayed }
            if seen.count >= capacity {
                seen = seen.filter { $0.value >= now }
                if seen.count >= capacity { return .full }
            }
            seen[nonce] = signedAt + lifetimeMilliseconds
            return .fresh
        }
    }
}

/// The origins signatures are bound to; known once the listener is bound
/// (the port may be chosen by the system).
final class OriginSet: @unchecked Sendable {
    private let lock = NSLock()
    private var origins: [String]

    init(_ origins: [String] = []) {
        self.origins = origins
    }

    var current: [String] {
        get { lock.withLock { origins } }
        set { lock.withLock { origins = newValue } }
    }
}
