import Foundation
import Synchronization

/// Token buckets keyed by an IP address or an identity, shared by every
/// connection and HTTP request. Idle keys (whose bucket would be full
/// again) are forgotten when the table grows, so its size stays bounded by
/// the keys active within one refill period.
///
/// A key's bucket is an object of its own: a connection looks its
/// address's and its identity's up once and then takes from them
/// directly, under a lock only that key's takers share, instead of a
/// lookup under the table's lock per publish (which every publish of every
/// loop contended for: 1 µs of the relay's CPU per message at 100
/// clients).
final class KeyedRateLimiter: Sendable {
    final class Bucket: Sendable {
        private let state: Mutex<(bucket: TokenBucket, lastUse: Duration)>

        fileprivate init(ratePerSecond: Double, burst: Double, now: Duration) {
            state = Mutex((TokenBucket(ratePerSecond: ratePerSecond, burst: burst, now: now), now))
        }

        func take(now: Duration) -> TokenBucket.Decision {
            state.withLock { state in
                state.lastUse = now
                return state.bucket.take(now: now)
            }
        }

        fileprivate func isIdle(now: Duration, refill: Duration) -> Bool {
            state.withLock { now - $0.lastUse >= refill }
        }
    }

    private struct Table {
        var buckets: [String: Bucket] = [:]
        /// When the table was last searched for idle buckets.
        var lastSearch: Duration?
    }

    private let ratePerSecond: Double
    private let burst: Double
    private let maxKeys: Int
    /// How long an unused bucket takes to be full again.
    private let refill: Duration
    private let table = Mutex(Table())

    init(ratePerSecond: Double, burst: Double, maxKeys: Int = 100_000) {
        self.ratePerSecond = ratePerSecond
        self.burst = burst
        self.maxKeys = maxKeys
        refill = ratePerSecond > 0 ? .seconds(burst / ratePerSecond) : .seconds(3600)
    }

    /// The bucket of `key`, made full if there is none.
    ///
    /// A full table is searched for idle buckets at most once per refill
    /// period: no bucket becomes idle sooner, and a table full of busy keys
    /// (a flood from many addresses) would otherwise be searched in full
    /// for every new key. Until the next search it grows past `maxKeys`,
    /// by the keys that arrive within one refill period.
    func bucket(_ key: String, now: Duration) -> Bucket {
        table.withLock { table in
            if let bucket = table.buckets[key] { return bucket }
            if table.buckets.count >= maxKeys, table.lastSearch.map({ now - $0 >= refill }) ?? true {
                table.lastSearch = now
                forgetIdle(&table.buckets, now: now)
            }
            let bucket = Bucket(ratePerSecond: ratePerSecond, burst: burst, now: now)
            table.buckets[key] = bucket
            return bucket
        }
    }

    func take(_ key: String, now: Duration) -> TokenBucket.Decision {
        bucket(key, now: now).take(now: now)
    }

    /// How many keys have a bucket.
    var keyCount: Int { table.withLock { $0.buckets.count } }

    /// Forgets the buckets that are full again and that no connection
    /// holds: a held one stays however idle, or a new connection from the
    /// same key would get a full bucket beside it.
    private func forgetIdle(_ buckets: inout [String: Bucket], now: Duration) {
        for key in Array(buckets.keys) {
            // Out of the table, so that the table's own reference is not
            // counted twice.
            guard var bucket = buckets.removeValue(forKey: key) else { continue }
            if !isKnownUniquelyReferenced(&bucket) || !bucket.isIdle(now: now, refill: refill) {
                buckets[key] = bucket
            }
        }
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
