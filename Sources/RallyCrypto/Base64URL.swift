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
            var index = 0
            while index + 3 <= bytes.count {
                let chunk = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
                output.append(alphabet[Int(chunk >> 18 & 63)])
                output.append(alphabet[Int(chunk >> 12 & 63)])
                output.append(alphabet[Int(chunk >> 6 & 63)])
                output.append(alphabet[Int(chunk & 63)])
                index += 3
            }
            switch bytes.count - index {
            case 1:
                let chunk = UInt32(bytes[index]) << 16
                output.append(alphabet[Int(chunk >> 18 & 63)])
                output.append(alphabet[Int(chunk >> 12 & 63)])
            case 2:
                let chunk = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8
                output.append(alphabet[Int(chunk >> 18 & 63)])
                output.append(alphabet[Int(chunk >> 12 & 63)])
                output.append(alphabet[Int(chunk >> 6 & 63)])
            default:
                break
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
            var written = 0
            var accumulator: UInt32 = 0
            var held = 0
            for byte in text {
                let value = values[Int(byte)]
                guard value != invalid else { return false }
                accumulator = accumulator << 6 | UInt32(value)
                held += 1
                if held == 4 {
                    buffer[written] = UInt8(truncatingIfNeeded: accumulator >> 16)
                    buffer[written + 1] = UInt8(truncatingIfNeeded: accumulator >> 8)
                    buffer[written + 2] = UInt8(truncatingIfNeeded: accumulator)
                    written += 3
                    accumulator = 0
                    held = 0
                }
            }
            switch held {
            case 2:
                buffer[written] = UInt8(truncatingIfNeeded: accumulator >> 4)
            case 3:
                buffer[written] = UInt8(truncatingIfNeeded: accumulator >> 10)
                buffer[written + 1] = UInt8(truncatingIfNeeded: accumulator >> 2)
            default:
                break
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
