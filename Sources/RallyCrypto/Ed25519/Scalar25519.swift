/// Scalars mod the group order L = 2^252 + 27742317777372353535851937790883648493,
/// as four little-endian 64-bit words.
enum Scalar25519 {
    static let order: [UInt64] = [0x5812_631A_5CF5_D3ED, 0x14DE_F9DE_A2F7_9CD6, 0, 0x1000_0000_0000_0000]

    /// Whether 32 little-endian bytes are a scalar below L, the check RFC 8032
    /// section 5.1.7 asks of a signature's s (and BoringSSL makes).
    static func isCanonical(_ bytes: ArraySlice<UInt8>) -> Bool {
        let words = littleEndianWords(bytes)
        for index in stride(from: 3, through: 0, by: -1) where words[index] != order[index] {
            return words[index] < order[index]
        }
        return false
    }

    /// A little-endian number of any length reduced mod L, one byte at a
    /// time from the top: r = r·256 + byte, less q·L for q = that >> 252.
    static func reduced(_ bytes: some Collection<UInt8>) -> [UInt64] {
        var r: [UInt64] = [0, 0, 0, 0]
        for byte in bytes.reversed() {
            // value = r·256 + byte, in five words (r < L < 2^253).
            var value: [UInt64] = [
                r[0] << 8 | UInt64(byte), r[1] << 8 | r[0] >> 56, r[2] << 8 | r[1] >> 56, r[3] << 8 | r[2] >> 56,
                r[3] >> 56,
            ]
            let q = value[3] >> 60 | value[4] << 4
            // value - q·L; q·L can exceed value by less than q·2^125 < L.
            var borrow: UInt64 = 0
            var carry: UInt64 = 0
            for index in 0..<5 {
                let (high, low) = index < 4 ? q.multipliedFullWidth(by: order[index]) : (0, 0)
                let (product, productOverflow) = low.addingReportingOverflow(carry)
                carry = high &+ (productOverflow ? 1 : 0)
                let (difference, overflow1) = value[index].subtractingReportingOverflow(product)
                let (final, overflow2) = difference.subtractingReportingOverflow(borrow)
                value[index] = final
                borrow = (overflow1 ? 1 : 0) + (overflow2 ? 1 : 0)
            }
            if borrow != 0 {
                var addCarry: UInt64 = 0
                for index in 0..<4 {
                    let (sum1, overflow1) = value[index].addingReportingOverflow(order[index])
                    let (sum2, overflow2) = sum1.addingReportingOverflow(addCarry)
                    value[index] = sum2
                    addCarry = (overflow1 ? 1 : 0) + (overflow2 ? 1 : 0)
                }
            }
            r = Array(value[0..<4])
        }
        return r
    }

    /// 64 signed digits in -8...8 with scalar = Σ digit[i]·16^i, for a scalar
    /// below 2^255 (every reduced scalar and every canonical s is).
    static func radix16Digits(_ words: [UInt64]) -> [Int8] {
        var digits = [Int8](repeating: 0, count: 64)
        for index in 0..<64 {
            digits[index] = Int8(truncatingIfNeeded: (words[index / 16] >> (4 * UInt64(index % 16))) & 15)
        }
        var carry: Int8 = 0
        for index in 0..<63 {
            digits[index] += carry
            carry = (digits[index] + 8) >> 4
            digits[index] -= carry << 4
        }
        digits[63] += carry
        return digits
    }

    static func littleEndianWords(_ bytes: some Collection<UInt8>) -> [UInt64] {
        var words: [UInt64] = [0, 0, 0, 0]
        for (index, byte) in bytes.prefix(32).enumerated() {
            words[index / 8] |= UInt64(byte) << (8 * UInt64(index % 8))
        }
        return words
    }
}
