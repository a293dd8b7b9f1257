import Crypto
public import Foundation

/// The address of an identity: the first 20 bytes of SHA-256 over its
/// Ed25519 signing public key, in lowercase base32 (32 characters). Anyone
/// can check that a key bundle belongs to an inbox id; nobody can choose a
/// key for a given id.
public struct InboxID: Hashable, Sendable, Codable, Comparable, CustomStringConvertible {
    public static let byteCount = 20
    public static let textLength = 32

    public let rawValue: String

    public init(signingPublicKey: Data) {
        let digest = SHA256.hash(data: signingPublicKey)
        rawValue = digest.withUnsafeBytes { Base32.encode($0.prefix(Self.byteCount)) }
    }

    public init(validating text: String) throws(RallyCryptoError) {
        // The canonical spelling (what every stored record and wire field
        // holds) needs no trimming, folding or decoding: 32 characters of
        // the lowercase alphabet are exactly 20 bytes.
        if Self.isCanonical(text) {
            rawValue = text
            return
        }
        let stripped = text.trimmingCharacters(in: .whitespacesAndNewlines)
        // ASCII only before case folding: Unicode lowercasing would map
        // look-alikes (the Kelvin sign) onto valid letters.
        guard stripped.utf8.allSatisfy({ $0 < 0x80 }) else { throw .invalidInboxID(text) }
        let trimmed = stripped.lowercased()
        guard trimmed.utf8.count == Self.textLength, let bytes = Base32.decode(trimmed),
            bytes.count == Self.byteCount
        else {
            throw .invalidInboxID(text)
        }
        rawValue = trimmed
    }

    private static func isCanonical(_ text: String) -> Bool {
        let utf8 = text.utf8
        guard utf8.count == textLength else { return false }
        return utf8.allSatisfy {
            ($0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "z")) || ($0 >= UInt8(ascii: "2") && $0 <= UInt8(ascii: "7"))
        }
    }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        self = try InboxID(validating: text)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }

    public var description: String { rawValue }

    public static func < (lhs: InboxID, rhs: InboxID) -> Bool { lhs.rawValue < rhs.rawValue }
}
