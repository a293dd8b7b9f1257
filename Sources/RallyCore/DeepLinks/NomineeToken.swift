import Crypto
public import Foundation
import RallyCrypto

/// The secret in a nominee link: 32 random bytes (256 bits), written as
/// base64url without padding (exactly 43 characters).
///
/// It is a bearer secret: `description`, `debugDescription` and the mirror
/// (`dump`) print `NomineeToken(…)`, never the token, so it does not land in
/// logs by accident. Read ``text`` explicitly to put it in a link, and keep
/// ``hash`` (not the token) where only recognising it is needed.
public struct NomineeToken: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    public static let byteCount = 32
    /// base64url of ``byteCount`` bytes without padding.
    public static let textLength = 43
    /// Prefixed to the bytes before hashing, so the hash is of no use as
    /// any other SHA-256.
    public static let hashDomain = "rally-nominee-token-v1"

    /// The token's 32 bytes.
    public let bytes: Data

    /// - Throws: `.invalidToken(.byteCount)` unless `bytes` are exactly
    ///   ``byteCount`` long.
    public init(bytes: Data) throws(DeepLinkError) {
        guard bytes.count == Self.byteCount else { throw .invalidToken(.byteCount(bytes.count)) }
        self.bytes = Data(bytes)
    }

    /// Reads the text form strictly: exactly ``textLength`` base64url
    /// characters, no padding, and a last character whose two unused low
    /// bits are zero (so each token has exactly one text).
    /// - Throws: `.invalidToken(.length / .alphabet / .nonCanonical)`.
    public init(text: String) throws(DeepLinkError) {
        let scalars = text.unicodeScalars
        guard scalars.count == Self.textLength else { throw .invalidToken(.length(characters: scalars.count)) }
        var values: [UInt8] = []
        values.reserveCapacity(Self.textLength)
        for scalar in scalars {
            guard let value = Self.sextet(scalar) else { throw .invalidToken(.alphabet) }
            values.append(value)
        }
        guard values[Self.textLength - 1] & 0b11 == 0 else { throw .invalidToken(.nonCanonical) }
        var bytes = Data(capacity: Self.byteCount)
        var accumulator: UInt32 = 0
        var bits = 0
        for value in values {
            accumulator = accumulator << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                bytes.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
            }
        }
        self.bytes = bytes
    }

    /// A new token from the system's secure random generator.
    public static func random() -> NomineeToken {
        NomineeToken(unchecked: Randomness.bytes(byteCount))
    }

    /// A token from `generator`: for tests that replay from a seed. Real
    /// tokens come from ``random()``.
    public static func random<G: RandomNumberGenerator>(using generator: inout G) -> NomineeToken {
        NomineeToken(unchecked: Data((0..<byteCount).map { _ in UInt8.random(in: .min ... .max, using: &generator) }))
    }

    private init(unchecked bytes: Data) { self.bytes = bytes }

    /// The token as it appears in a link: base64url, no padding, 43 characters.
    public var text: String { bytes.base64URLEncoded() }

    /// SHA-256 over ``hashDomain`` (as UTF-8) followed by the bytes: what to
    /// store or send to recognise the token without holding it.
    public var hash: Data {
        Data(SHA256.hash(data: Data(Self.hashDomain.utf8) + bytes))
    }

    public var description: String { "NomineeToken(…)" }
    public var debugDescription: String { "NomineeToken(…)" }
    public var customMirror: Mirror { Mirror(self, children: [:], displayStyle: .struct) }

    static func sextet(_ scalar: Unicode.Scalar) -> UInt8? {
        switch scalar {
        case "A"..."Z": UInt8(scalar.value - 65)
        case "a"..."z": UInt8(scalar.value - 97 + 26)
        case "0"..."9": UInt8(scalar.value - 48 + 52)
        case "-": 62
        case "_": 63
        default: nil
        }
    }
}
