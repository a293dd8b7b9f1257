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
        if let decoded = text.withContiguousStorageIfAvailable({ decode(contiguous: $0) }) { return decoded }
        return Array(text).withUnsafeBufferPointer { decode(contiguous: $0) }
    }

    /// Four characters to three bytes at a time, through the table as a
    /// buffer (an invite is a few hundred characters, every one of them
    /// read here before its signature is checked).
    private static func decode(contiguous text: UnsafeBufferPointer<UInt8>) -> Data? {
        let count = text.count
        guard count % 4 != 1 else { return nil }
        let length = count / 4 * 3 + max(0, count % 4 - 1)
        var output = Data(count: length)
        let decoded = values.withUnsafeBufferPointer { table in
            output.withUnsafeMutableBytes { (buffer: UnsafeMutableRawBufferPointer) -> Bool in
                var read = 0
                var written = 0
                while read + 4 <= count {
                    let a = table[Int(text[read])]
                    let b = table[Int(text[read + 1])]
                    let c = table[Int(text[read + 2])]
                    let d = table[Int(text[read + 3])]
                    // Values are below 64; `invalid` has the top bits set.
                    guard (a | b | c | d) & 0xC0 == 0 else { return false }
                    let chunk = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                    buffer[written] = UInt8(truncatingIfNeeded: chunk >> 16)
                    buffer[written + 1] = UInt8(truncatingIfNeeded: chunk >> 8)
                    buffer[written + 2] = UInt8(truncatingIfNeeded: chunk)
                    read += 4
                    written += 3
                }
                // Two or three characters left make one or two bytes; the
                // last character's spare bits are dropped.
                var accumulator: UInt32 = 0
                var bits = 0
                while read < count {
                    let value = table[Int(text[read])]
                    guard value != invalid else { return false }
                    accumulator = accumulator << 6 | UInt32(value)
                    bits += 6
                    if bits >= 8 {
                        bits -= 8
                        buffer[written] = UInt8(truncatingIfNeeded: accumulator >> bits)
                        written += 1
                    }
                    read += 1
                }
                return true
            }
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
