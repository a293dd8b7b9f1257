public import Crypto
public import Foundation

/// Ed25519 verification for a key that signs many times (an invite issuer,
/// a group's admin, a chat partner): the key's multiples are computed once,
/// so each verification is two fixed-base multiplications read from tables
/// instead of a double-scalar multiplication and a point decompression.
///
/// It accepts exactly what swift-crypto's `isValidSignature` (BoringSSL's
/// `ED25519_verify`) accepts: s below L, k = SHA-512(R ‖ A ‖ M) mod L, and
/// the encoding of [s]B - [k]A equal to R byte for byte (cofactorless), with A
/// decoded as BoringSSL decodes it. `Ed25519KeyTableTests` holds it to that
/// on valid, tampered and hostile signatures and keys. See docs/adr/0027.
///
/// Everything it works on is public, so it is not constant-time.
public struct Ed25519KeyTable: Sendable {
    /// 32 rows of [1…8]·256^row·P for a point P, 30 KiB in affine form.
    struct Multiples: Sendable {
        let entries: [AffineNielsPoint]

        init(of point: EdwardsPoint) {
            var points = [EdwardsPoint]()
            points.reserveCapacity(32 * 8)
            var rowBase = point
            for _ in 0..<32 {
                var multiple = rowBase
                points.append(multiple)
                for _ in 2...8 {
                    multiple = multiple + rowBase
                    points.append(multiple)
                }
                // 256·rowBase = 32·(8·rowBase).
                rowBase = multiple.doubled.doubled.doubled.doubled.doubled
            }
            entries = AffineNielsPoint.normalizing(points)
        }

        /// acc + digit·256^row·P.
        @inline(__always)
        func add(_ digit: Int8, row: Int, to acc: inout EdwardsPoint) {
            guard digit != 0 else { return }
            let magnitude = Int(digit < 0 ? -digit : digit)
            acc = acc.adding(entries[row * 8 + magnitude - 1], negative: digit < 0)
        }
    }

    static let baseMultiples = Multiples(of: .base)

    public let publicKey: Data
    private let negatedKeyMultiples: Multiples

    /// Nil when the key is not the encoding of a curve point: no signature
    /// verifies under it (as with swift-crypto).
    public init?(publicKey: Data) {
        guard let point = EdwardsPoint(encoding: [UInt8](publicKey)) else { return nil }
        self.publicKey = publicKey
        negatedKeyMultiples = Multiples(of: point.negated)
    }

    public init?(_ key: Curve25519.Signing.PublicKey) { self.init(publicKey: key.rawRepresentation) }

    public func isValidSignature(_ signature: some DataProtocol, for message: some DataProtocol) -> Bool {
        let signature = [UInt8](signature)
        guard signature.count == 64, Scalar25519.isCanonical(signature[32..<64]) else { return false }
        var hash = SHA512()
        hash.update(data: signature[0..<32])
        hash.update(data: publicKey)
        hash.update(data: message)
        let k = Scalar25519.radix16Digits(Scalar25519.reduced(Array(hash.finalize())))
        let s = Scalar25519.radix16Digits(Scalar25519.littleEndianWords(signature[32..<64]))
        return Self.combine(s: s, k: k, keyMultiples: negatedKeyMultiples).encoding[...] == signature[0..<32]
    }

    /// [s]B + [k]P from two tables, ref10's split: the odd digits first,
    /// times 16, then the even ones (128 table additions, 4 doublings).
    static func combine(s: [Int8], k: [Int8], keyMultiples: Multiples) -> EdwardsPoint {
        var acc = EdwardsPoint.identity
        for index in stride(from: 1, to: 64, by: 2) {
            baseMultiples.add(s[index], row: index / 2, to: &acc)
            keyMultiples.add(k[index], row: index / 2, to: &acc)
        }
        acc = acc.doubled.doubled.doubled.doubled
        for index in stride(from: 0, to: 64, by: 2) {
            baseMultiples.add(s[index], row: index / 2, to: &acc)
            keyMultiples.add(k[index], row: index / 2, to: &acc)
        }
        return acc
    }
}
