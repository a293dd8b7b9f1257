public import Foundation

/// Unpadded base64url (RFC 4648 §5), byte by byte: invites, call links,
/// tokens and every signed request header go through it, so it avoids the
/// string replacements (Foundation string searches) a detour through
/// standard base64 costs.
enum Base64URL {
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    /// Each byte's 6-bit value, or `invalid`.
    static let values: [UInt8] = {
        var table = [UInt8](repeating: invalid, count: 256)
        for (index, byte) in alphabet.enumerated() { table[Int(byte)] = UInt8(index) }
        return table
    }()
    static let invalid: UInt8 = 0xFF

    static func encode(_ data: Data) -> String {
        var output = [UInt8]()
        output.reserveCapacity((data.count * 4 + 2) / 3)
        data.withUnsafeBytes { (bytes: UnsafeRawBufferPointer) in
            // Three bytes (fewer at the end) make four characters (one more
            // than the bytes at the end: no padding).
            var index = 0
            while index < bytes.count {
                let taken = min(3, bytes.count - index)
                var chunk: UInt32 = 0
                for offset in 0..<3 {
                    chunk = chunk << 8 | (offset < taken ? UInt32(bytes[index + offset]) : 0)
                }
                for position in 0...taken { output.append(alphabet[Int(chunk >> (18 - 6 * position) & 63)]) }
                index += 3
            }
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// Nil for anything outside the alphabet (padding, `+`, `/`, spaces) or
    /// a length no byte string encodes to.
    static func decode<Bytes: Collection>(_ text: Bytes) -> Data? where Bytes.Element == UInt8 {
        let count = text.count
        guard count % 4 != 1 else { return nil }
        let length = count / 4 * 3 + max(0, count % 4 - 1)
        var output = Data(count: length)
        let decoded = output.withUnsafeMutableBytes { (buffer: UnsafeMutableRawBufferPointer) -> Bool in
            // Six bits in per character, a byte out whenever eight wait;
            // the last character's spare bits are dropped.
            var written = 0
            var accumulator: UInt32 = 0
            var bits = 0
            for byte in text {
                let value = values[Int(byte)]
                guard value != invalid else { return false }
                accumulator = accumulator << 6 | UInt32(value)
                bits += 6
                if bits >= 8 {
                    bits -= 8
                    buffer[written] = UInt8(truncatingIfNeeded: accumulator >> bits)
                    written += 1
                }
            }
            return true
        }
        return decoded ? output : nil
    }
}

extension Data {
    /// Unpadded base64url.
    public func base64URLEncoded() -> String { Base64URL.encode(self) }

    /// Reads unpadded base64url; nil for anything else.
    public init?(base64URLEncoded text: String) {
        guard let data = Base64URL.decode(text.utf8) else { return nil }
        self = data
    }
}
