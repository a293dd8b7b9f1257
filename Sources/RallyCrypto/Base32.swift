public import Foundation

/// RFC 4648 base32 in lowercase without padding: compact, case-stable and
/// safe in URLs, file names and topic names.
public enum Base32 {
    private static let alphabet = Array("abcdefghijklmnopqrstuvwxyz234567".utf8)
    private static let reverse: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, char) in alphabet.enumerated() { table[Int(char)] = UInt8(index) }
        return table
    }()

    public static func encode(_ data: some Collection<UInt8>) -> String {
        // Written straight into the string's storage: an inbox id is
        // encoded for every member of a group a newcomer reads.
        String(unsafeUninitializedCapacity: (data.count * 8 + 4) / 5) { out in
            var written = 0
            var buffer: UInt32 = 0
            var bits = 0
            for byte in data {
                buffer = (buffer << 8) | UInt32(byte)
                bits += 8
                while bits >= 5 {
                    bits -= 5
                    out[written] = alphabet[Int((buffer >> UInt32(bits)) & 0x1F)]
                    written += 1
                }
            }
            if bits > 0 {
                out[written] = alphabet[Int((buffer << UInt32(5 - bits)) & 0x1F)]
                written += 1
            }
            return written
        }
    }

    /// Returns nil for any character outside the alphabet or for trailing
    /// bits that are not zero (so each byte string has one spelling).
    public static func decode(_ text: String) -> Data? {
        var out = Data()
        out.reserveCapacity(text.utf8.count * 5 / 8)
        var buffer: UInt32 = 0
        var bits = 0
        for char in text.utf8 {
            let value = reverse[Int(char)]
            guard value != 0xFF else { return nil }
            buffer = (buffer << 5) | UInt32(value)
            bits += 5
            if bits >= 8 {
                bits -= 8
                out.append(UInt8((buffer >> UInt32(bits)) & 0xFF))
            }
        }
        // 5 or more leftover bits would be a whole character too many.
        guard bits < 5, buffer & ((1 << UInt32(bits)) - 1) == 0 else { return nil }
        return out
    }
}
