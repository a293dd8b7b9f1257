import Crypto
import Foundation
import RallyWire

/// Signed invites this process has verified: the same invite (a group link
/// that many people use, each request carrying it) costs one Ed25519
/// verification per process instead of one per request.
///
/// A hit needs the same signature over the same payload, and the payload
/// names the issuer's key, so it stands for exactly what was verified.
/// The key is SHA-256 over the signature's length, the signature and the
/// payload: with the length in front, no split of the same bytes into
/// another signature and payload can match. Only successes are kept; the
/// set is bounded and forgets its oldest entries first.
///
/// `@unchecked Sendable`: `entries` and `order` are read and written only
/// while `lock` is held.
final class VerifiedInviteCache: @unchecked Sendable {
    static let shared = VerifiedInviteCache(capacity: 4096)

    let capacity: Int
    private let lock = NSLock()
    /// Digests, not `Data`: no allocation per key, and a fixed 32 bytes to
    /// hash (a flood of distinct invites turns the set over once each).
    private var entries: Set<SHA256.Digest> = []
    private var order: [SHA256.Digest] = []
    private var oldest = 0

    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    static func key(_ signed: WireSignedInvite) -> SHA256.Digest {
        var hasher = SHA256()
        withUnsafeBytes(of: UInt64(signed.signature.count).bigEndian) { hasher.update(bufferPointer: $0) }
        hasher.update(data: signed.signature)
        hasher.update(data: signed.payload)
        return hasher.finalize()
    }

    func contains(_ key: SHA256.Digest) -> Bool {
        lock.withLock { entries.contains(key) }
    }

    func insert(_ key: SHA256.Digest) {
        lock.withLock {
            guard entries.insert(key).inserted else { return }
            if order.count < capacity {
                order.append(key)
            } else {
                entries.remove(order[oldest])
                order[oldest] = key
                oldest = (oldest + 1) % capacity
            }
        }
    }

    var count: Int { lock.withLock { entries.count } }
}
