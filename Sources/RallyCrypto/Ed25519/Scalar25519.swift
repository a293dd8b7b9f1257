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
    /// In five local words, not arrays: a verification reduces a 64-byte
    /// hash, and an array per byte was a heap allocation per byte.
    static func reduced(_ bytes: some Collection<UInt8>) -> [UInt64] {
        var (r0, r1, r2, r3): (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        let (o0, o1, o2, o3) = (order[0], order[1], order[2], order[3])
        for byte in bytes.reversed() {
            // value = r·256 + byte, in five words (r < L < 2^253).
            var v0 = r0 << 8 | UInt64(byte)
            var v1 = r1 << 8 | r0 >> 56
            var v2 = r2 << 8 | r1 >> 56
            var v3 = r3 << 8 | r2 >> 56
            var v4 = r3 >> 56
            let q = v3 >> 60 | v4 << 4
            // value - q·L; q·L can exceed value by less than q·2^125 < L.
            var carry: UInt64 = 0
            var borrow: UInt64 = 0
            subtractProduct(&v0, q, o0, &carry, &borrow)
            subtractProduct(&v1, q, o1, &carry, &borrow)
            subtractProduct(&v2, q, o2, &carry, &borrow)
            subtractProduct(&v3, q, o3, &carry, &borrow)
            subtractProduct(&v4, q, 0, &carry, &borrow)
            if borrow != 0 {
                var addCarry: UInt64 = 0
                addWord(&v0, o0, &addCarry)
                addWord(&v1, o1, &addCarry)
                addWord(&v2, o2, &addCarry)
                addWord(&v3, o3, &addCarry)
            }
            (r0, r1, r2, r3) = (v0, v1, v2, v3)
        }
        return [r0, r1, r2, r3]
    }

    /// word -= q·orderWord + the carry and borrow of the word below.
    @inline(__always)
    private static func subtractProduct(
        _ word: inout UInt64, _ q: UInt64, _ orderWord: UInt64, _ carry: inout UInt64, _ borrow: inout UInt64
    ) {
        let (high, low) = q.multipliedFullWidth(by: orderWord)
        let (product, productOverflow) = low.addingReportingOverflow(carry)
        carry = high &+ (productOverflow ? 1 : 0)
        let (difference, overflow1) = word.subtractingReportingOverflow(product)
        let (final, overflow2) = difference.subtractingReportingOverflow(borrow)
        word = final
        borrow = (overflow1 ? 1 : 0) + (overflow2 ? 1 : 0)
    }

    @inline(__always)
    private static func addWord(_ word: inout UInt64, _ orderWord: UInt64, _ carry: inout UInt64) {
        let (sum1, overflow1) = word.addingReportingOverflow(orderWord)
        let (sum2, overflow2) = sum1.addingReportingOverflow(carry)
        word = sum2
        carry = (overflow1 ? 1 : 0) + (overflow2 ? 1 : 0)
    }

    /// 64 signed digits in -8...8 with scalar = Σ digit[i]·16^i.
    static func radix16Digits(_ words: [UInt64]) -> [Int8] { signedDigits(words, bits: 4) }

    /// Signed digits in -2^(bits-1)...2^(bits-1) with scalar = Σ digit[i]·2^(bits·i),
    /// ceil(256 / bits) of them. The top digit takes the last carry, so the
    /// scalar must be below 2^253 (every reduced scalar and every canonical
    /// s is) for it to fit at 8 bits; `bits` is 2 through 8.
    static func signedDigits(_ words: [UInt64], bits: Int) -> [Int8] {
        precondition((2...8).contains(bits) && words.count == 4 && words[3] >> 61 == 0)
        let count = (256 + bits - 1) / bits
        let radix = 1 << bits
        let half = radix >> 1
        var digits = [Int8](repeating: 0, count: count)
        var carry = 0
        for index in 0..<count {
            let bit = index * bits
            var window = Int(truncatingIfNeeded: words[bit / 64] >> UInt64(bit % 64))
            if bit % 64 + bits > 64, bit / 64 + 1 < 4 {
                window |= Int(truncatingIfNeeded: words[bit / 64 + 1] << UInt64(64 - bit % 64))
            }
            var digit = (window & (radix - 1)) + carry
            carry = index + 1 < count ? (digit + half) >> bits : 0
            digit -= carry << bits
            digits[index] = Int8(truncatingIfNeeded: digit)
        }
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
