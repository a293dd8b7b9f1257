/// An element of GF(2^255 - 19) in five 51-bit limbs, for the verification
/// in `Ed25519KeyTable`. Every operation returns limbs below 2^52 and takes
/// limbs below 2^53, so products of two limbs (times 19) fit in 128 bits.
///
/// Verification works on public values only (keys, signatures, messages),
/// so nothing here needs to run in constant time, and nothing does.
struct FieldElement: Equatable {
    var l0: UInt64
    var l1: UInt64
    var l2: UInt64
    var l3: UInt64
    var l4: UInt64

    static let mask: UInt64 = (1 << 51) - 1
    static let zero = FieldElement(l0: 0, l1: 0, l2: 0, l3: 0, l4: 0)
    static let one = FieldElement(l0: 1, l1: 0, l2: 0, l3: 0, l4: 0)

    init(l0: UInt64, l1: UInt64, l2: UInt64, l3: UInt64, l4: UInt64) {
        (self.l0, self.l1, self.l2, self.l3, self.l4) = (l0, l1, l2, l3, l4)
    }

    init(_ small: UInt64) {
        self = FieldElement(l0: small & Self.mask, l1: small >> 51, l2: 0, l3: 0, l4: 0)
    }

    /// The low 255 bits of 32 little-endian bytes, as BoringSSL's
    /// `fe_frombytes` reads them: bit 255 is ignored and a value at or
    /// above p is taken as it is (it is the same element mod p).
    init(bytes: UnsafeRawBufferPointer) {
        precondition(bytes.count >= 32)
        let w0 = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 0, as: UInt64.self))
        let w1 = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
        let w2 = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 16, as: UInt64.self))
        let w3 = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 24, as: UInt64.self))
        self = FieldElement(
            l0: w0 & Self.mask,
            l1: (w0 >> 51 | w1 << 13) & Self.mask,
            l2: (w1 >> 38 | w2 << 26) & Self.mask,
            l3: (w2 >> 25 | w3 << 39) & Self.mask,
            l4: (w3 >> 12) & Self.mask)
    }

    /// The canonical encoding: the value reduced below p, little-endian.
    var bytes: [UInt8] {
        var h = self.carried.carried
        // h < 2p now; q is 1 exactly when h >= p.
        var q = (h.l0 &+ 19) >> 51
        q = (h.l1 &+ q) >> 51
        q = (h.l2 &+ q) >> 51
        q = (h.l3 &+ q) >> 51
        q = (h.l4 &+ q) >> 51
        h.l0 &+= 19 &* q
        h.l1 &+= h.l0 >> 51
        h.l0 &= Self.mask
        h.l2 &+= h.l1 >> 51
        h.l1 &= Self.mask
        h.l3 &+= h.l2 >> 51
        h.l2 &= Self.mask
        h.l4 &+= h.l3 >> 51
        h.l3 &= Self.mask
        h.l4 &= Self.mask
        let words = [h.l0 | h.l1 << 51, h.l1 >> 13 | h.l2 << 38, h.l2 >> 26 | h.l3 << 25, h.l3 >> 39 | h.l4 << 12]
        var out = [UInt8](repeating: 0, count: 32)
        for (index, word) in words.enumerated() {
            for byte in 0..<8 { out[index * 8 + byte] = UInt8(truncatingIfNeeded: word >> (8 * UInt64(byte))) }
        }
        return out
    }

    var isZero: Bool { bytes.allSatisfy { $0 == 0 } }
    /// The sign Ed25519 encodes in bit 255: the canonical value's low bit.
    var isNegative: Bool { bytes[0] & 1 == 1 }

    /// Limbs brought back below 2^52 (the top carry wraps around as 19).
    var carried: FieldElement {
        var h = self
        h.l1 &+= h.l0 >> 51
        h.l0 &= Self.mask
        h.l2 &+= h.l1 >> 51
        h.l1 &= Self.mask
        h.l3 &+= h.l2 >> 51
        h.l2 &= Self.mask
        h.l4 &+= h.l3 >> 51
        h.l3 &= Self.mask
        h.l0 &+= 19 &* (h.l4 >> 51)
        h.l4 &= Self.mask
        return h
    }

    static func + (a: FieldElement, b: FieldElement) -> FieldElement {
        FieldElement(l0: a.l0 &+ b.l0, l1: a.l1 &+ b.l1, l2: a.l2 &+ b.l2, l3: a.l3 &+ b.l3, l4: a.l4 &+ b.l4)
            .carried
    }

    /// a - b as a + 4p - b, limb by limb, so no limb goes below zero.
    static func - (a: FieldElement, b: FieldElement) -> FieldElement {
        FieldElement(
            l0: (a.l0 &+ 0x1F_FFFF_FFFF_FFB4) &- b.l0,
            l1: (a.l1 &+ 0x1F_FFFF_FFFF_FFFC) &- b.l1,
            l2: (a.l2 &+ 0x1F_FFFF_FFFF_FFFC) &- b.l2,
            l3: (a.l3 &+ 0x1F_FFFF_FFFF_FFFC) &- b.l3,
            l4: (a.l4 &+ 0x1F_FFFF_FFFF_FFFC) &- b.l4
        ).carried
    }

    static prefix func - (a: FieldElement) -> FieldElement { .zero - a }

    static func * (a: FieldElement, b: FieldElement) -> FieldElement {
        let b1 = b.l1 &* 19
        let b2 = b.l2 &* 19
        let b3 = b.l3 &* 19
        let b4 = b.l4 &* 19
        var r0 = Wide(a.l0, b.l0, a.l1, b4, a.l2, b3, a.l3, b2, a.l4, b1)
        var r1 = Wide(a.l0, b.l1, a.l1, b.l0, a.l2, b4, a.l3, b3, a.l4, b2)
        var r2 = Wide(a.l0, b.l2, a.l1, b.l1, a.l2, b.l0, a.l3, b4, a.l4, b3)
        var r3 = Wide(a.l0, b.l3, a.l1, b.l2, a.l2, b.l1, a.l3, b.l0, a.l4, b4)
        var r4 = Wide(a.l0, b.l4, a.l1, b.l3, a.l2, b.l2, a.l3, b.l1, a.l4, b.l0)
        return reduce(&r0, &r1, &r2, &r3, &r4)
    }

    var squared: FieldElement {
        let a0x2 = l0 &* 2
        let a1x2 = l1 &* 2
        let a1x38 = l1 &* 38
        let a2x38 = l2 &* 38
        let a3x38 = l3 &* 38
        let a3x19 = l3 &* 19
        let a4x19 = l4 &* 19
        var r0 = Wide(l0, l0, a1x38, l4, a2x38, l3)
        var r1 = Wide(a0x2, l1, a2x38, l4, a3x19, l3)
        var r2 = Wide(a0x2, l2, l1, l1, a3x38, l4)
        var r3 = Wide(a0x2, l3, a1x2, l2, a4x19, l4)
        var r4 = Wide(a0x2, l4, a1x2, l3, l2, l2)
        return Self.reduce(&r0, &r1, &r2, &r3, &r4)
    }

    /// self squared `times` times.
    func squared(times: Int) -> FieldElement {
        var result = self
        for _ in 0..<times { result = result.squared }
        return result
    }

    /// self^(p-2) = 1/self (0 for 0), by ref10's chain: 254 squarings, 11 products.
    var inverse: FieldElement {
        let (z11, z2_250_1) = powerChain()
        return z2_250_1.squared(times: 5) * z11
    }

    /// self^((p-5)/8) = self^(2^252 - 3), the root step of decompression.
    var power2252Minus3: FieldElement {
        powerChain().z2_250_1.squared(times: 2) * self
    }

    /// self^11 and self^(2^250 - 1), the common head of both exponent chains.
    private func powerChain() -> (z11: FieldElement, z2_250_1: FieldElement) {
        let z2 = squared
        let z9 = z2.squared(times: 2) * self
        let z11 = z2 * z9
        let z2_5_0 = z11.squared * z9
        let z2_10_0 = z2_5_0.squared(times: 5) * z2_5_0
        let z2_20_0 = z2_10_0.squared(times: 10) * z2_10_0
        let z2_40_0 = z2_20_0.squared(times: 20) * z2_20_0
        let z2_50_0 = z2_40_0.squared(times: 10) * z2_10_0
        let z2_100_0 = z2_50_0.squared(times: 50) * z2_50_0
        let z2_200_0 = z2_100_0.squared(times: 100) * z2_100_0
        let z2_250_0 = z2_200_0.squared(times: 50) * z2_50_0
        return (z11, z2_250_0)
    }

    /// Sums of products of limbs, in 128 bits. Built on `multipliedFullWidth`
    /// and `addingReportingOverflow` rather than `UInt128`, whose operators
    /// are ordinary calls in a debug build and made verification there
    /// many times slower.
    struct Wide {
        var low: UInt64
        var high: UInt64

        @_transparent
        init(_ a: UInt64, _ b: UInt64) { (high, low) = a.multipliedFullWidth(by: b) }

        /// a0·b0 + a1·b1 + a2·b2: one limb of a square.
        @_transparent
        init(_ a0: UInt64, _ b0: UInt64, _ a1: UInt64, _ b1: UInt64, _ a2: UInt64, _ b2: UInt64) {
            self.init(a0, b0)
            add(a1, b1)
            add(a2, b2)
        }

        /// Five products summed: one limb of a product.
        @_transparent
        init(
            _ a0: UInt64, _ b0: UInt64, _ a1: UInt64, _ b1: UInt64, _ a2: UInt64, _ b2: UInt64, _ a3: UInt64,
            _ b3: UInt64, _ a4: UInt64, _ b4: UInt64
        ) {
            self.init(a0, b0, a1, b1, a2, b2)
            add(a3, b3)
            add(a4, b4)
        }

        @_transparent
        mutating func add(_ a: UInt64, _ b: UInt64) {
            let (productHigh, productLow) = a.multipliedFullWidth(by: b)
            let (sum, overflow) = low.addingReportingOverflow(productLow)
            low = sum
            high = high &+ productHigh &+ (overflow ? 1 : 0)
        }

        /// Adds a value below 2^64.
        @_transparent
        mutating func add(_ value: UInt64) {
            let (sum, overflow) = low.addingReportingOverflow(value)
            low = sum
            high = high &+ (overflow ? 1 : 0)
        }

        /// The bits above the low 51, and the low 51 (the sum is below 2^115).
        @_transparent
        var split: (carry: UInt64, limb: UInt64) { (high << 13 | low >> 51, low & FieldElement.mask) }
    }

    @_transparent
    private static func reduce(
        _ r0: inout Wide, _ r1: inout Wide, _ r2: inout Wide, _ r3: inout Wide, _ r4: inout Wide
    ) -> FieldElement {
        let (c0, l0) = r0.split
        r1.add(c0)
        let (c1, l1) = r1.split
        r2.add(c1)
        let (c2, l2) = r2.split
        r3.add(c2)
        let (c3, l3) = r3.split
        r4.add(c3)
        let (c4, l4) = r4.split
        // c4 < 2^64, so 19·c4 + l0 needs a wide sum; its carry into l1 is below 2^18.
        var t0 = Wide(c4, 19)
        t0.add(l0)
        let (carry, limb0) = t0.split
        return FieldElement(l0: limb0, l1: l1 &+ carry, l2: l2, l3: l3, l4: l4)
    }
}

extension FieldElement {
    /// d = -121665/121666, the curve's constant.
    static let d = -FieldElement(121_665) * FieldElement(121_666).inverse
    static let d2 = d + d
    /// A square root of -1: 2^((p-1)/4).
    static let sqrtMinusOne = FieldElement(2).power(exponentBits: sqrtMinusOneExponentBits)

    /// (p-1)/4 = 2^253 - 5, most significant bit first.
    private static var sqrtMinusOneExponentBits: [Bool] {
        // 2^253 - 5 = 0b1111...11011 (253 bits): all ones but bit 2.
        (0..<253).reversed().map { $0 != 2 }
    }

    /// Square-and-multiply, most significant bit first; for constants and tests.
    func power(exponentBits: [Bool]) -> FieldElement {
        var result = FieldElement.one
        for bit in exponentBits {
            result = result.squared
            if bit { result = result * self }
        }
        return result
    }
}
