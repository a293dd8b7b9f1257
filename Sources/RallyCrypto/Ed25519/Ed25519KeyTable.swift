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
    /// 32 rows of [1…m]·256^row·P for a point P, in affine form: m = 8
    /// for a key's table (30 KiB, the multiples of signed radix-16 digits),
    /// m = 128 for the base point's (480 KiB, of signed radix-256 digits).
    struct Multiples: Sendable {
        let entries: [AffineNielsPoint]
        let perRow: Int

        init(of point: EdwardsPoint, perRow: Int) {
            precondition(perRow >= 8)
            self.perRow = perRow
            var points = [EdwardsPoint]()
            points.reserveCapacity(32 * perRow)
            var rowBase = point
            for _ in 0..<32 {
                var multiple = rowBase
                points.append(multiple)
                for _ in 1..<perRow {
                    multiple = multiple + rowBase
                    points.append(multiple)
                }
                // 256·rowBase = 32·(8·rowBase), and every row holds 8·rowBase.
                rowBase = points[points.count - perRow + 7].doubled.doubled.doubled.doubled.doubled
            }
            entries = AffineNielsPoint.normalizing(points)
        }

        /// acc + digit·256^row·P.
        @inline(__always)
        func add(_ digit: Int8, row: Int, to acc: inout EdwardsPoint) {
            guard digit != 0 else { return }
            let magnitude = digit < 0 ? -Int(digit) : Int(digit)
            acc = acc.adding(entries[row * perRow + magnitude - 1], negative: digit < 0)
        }
    }

    /// The base point's multiples for s in signed radix-256 digits: 32
    /// additions and no doublings, where radix-16 digits took 64 additions
    /// (docs/adr/0027). Built once per process, on first use (about a
    /// millisecond in a release build).
    static let baseMultiples = Multiples(of: .base, perRow: 128)

    public let publicKey: Data
    private let negatedKeyMultiples: Multiples

    /// Nil when the key is not the encoding of a curve point: no signature
    /// verifies under it (as with swift-crypto).
    public init?(publicKey: Data) {
        guard let point = EdwardsPoint(encoding: [UInt8](publicKey)) else { return nil }
        self.publicKey = publicKey
        negatedKeyMultiples = Multiples(of: point.negated, perRow: 8)
    }

    public init?(_ key: Curve25519.Signing.PublicKey) { self.init(publicKey: key.rawRepresentation) }

    public func isValidSignature(_ signature: some DataProtocol, for message: some DataProtocol) -> Bool {
        let signature = [UInt8](signature)
        guard signature.count == 64, Scalar25519.isCanonical(signature[32..<64]) else { return false }
        var hash = SHA512()
        hash.update(data: signature[0..<32])
        hash.update(data: publicKey)
        hash.update(data: message)
        let k = Scalar25519.radix16Digits(Scalar25519.reduced(hash.finalize().withUnsafeBytes { [UInt8]($0) }))
        let s = Scalar25519.signedDigits(Scalar25519.littleEndianWords(signature[32..<64]), bits: 8)
        return Self.combine(s: s, k: k, keyMultiples: negatedKeyMultiples).encoding[...] == signature[0..<32]
    }

    /// [s]B + [k]P from two tables: k's radix-16 digits by ref10's split
    /// (the odd digits, times 16, then the even ones: 64 additions, 4
    /// doublings), then s's 32 radix-256 digits from the base table.
    static func combine(s: [Int8], k: [Int8], keyMultiples: Multiples) -> EdwardsPoint {
        var acc = EdwardsPoint.identity
        for index in stride(from: 1, to: 64, by: 2) {
            keyMultiples.add(k[index], row: index / 2, to: &acc)
        }
        acc = acc.doubled.doubled.doubled.doubled
        for index in stride(from: 0, to: 64, by: 2) {
            keyMultiples.add(k[index], row: index / 2, to: &acc)
        }
        let base = baseMultiples
        for index in 0..<32 {
            base.add(s[index], row: index, to: &acc)
        }
        return acc
    }
}
