import Crypto
import Foundation
import Testing

@testable import RallyCrypto

/// `Ed25519KeyTable` must accept exactly what swift-crypto (BoringSSL's
/// `ED25519_verify`) accepts, so every test here compares the two on the
/// same key, message and signature.
@Suite("Ed25519 key tables")
struct Ed25519KeyTableTests {
    /// The small-order points' encodings (identity, order 2, 4 and 8, both signs).
    static let smallOrderEncodings: [String] = [
        "0100000000000000000000000000000000000000000000000000000000000000",
        "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
        "0000000000000000000000000000000000000000000000000000000000000000",
        "0000000000000000000000000000000000000000000000000000000000000080",
        "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
        "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
        "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
        "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
    ]

    /// What swift-crypto says, and what the table says (false when the key
    /// does not decode, as no signature verifies under it).
    static func verdicts(
        key: Data, table: Ed25519KeyTable?, signature: Data, message: Data
    ) -> (
        swiftCrypto: Bool, table: Bool
    ) {
        let reference =
            (try? Curve25519.Signing.PublicKey(rawRepresentation: key))?.isValidSignature(signature, for: message)
            ?? false
        return (reference, table?.isValidSignature(signature, for: message) ?? false)
    }

    static func verdicts(key: Data, signature: Data, message: Data) -> (swiftCrypto: Bool, table: Bool) {
        verdicts(key: key, table: Ed25519KeyTable(publicKey: key), signature: signature, message: message)
    }

    @Test func fieldExponentChainsMatchSquareAndMultiply() {
        var generator = SeededGenerator(seed: 25519)
        // p - 2 and (p - 5)/8, most significant bit first.
        let pMinus2 = (0..<255).reversed().map { bit in bit != 2 && bit != 4 }
        let pMinus5Over8 = (0..<252).reversed().map { bit in bit != 1 }
        for _ in 0..<8 {
            let element = generator.bytes(32).withUnsafeBytes { FieldElement(bytes: $0) }
            #expect(element.inverse.bytes == element.power(exponentBits: pMinus2).bytes)
            #expect(element.power2252Minus3.bytes == element.power(exponentBits: pMinus5Over8).bytes)
            #expect((element * element.inverse).bytes == FieldElement.one.bytes)
        }
        #expect(FieldElement.zero.inverse.isZero)
    }

    @Test func curveConstantsAreWhatTheyClaim() {
        #expect((FieldElement.sqrtMinusOne.squared + .one).isZero)
        // d·121666 = -121665.
        #expect((FieldElement.d * FieldElement(121_666) + FieldElement(121_665)).isZero)
        // The base point lies on the curve and encodes back to its standard bytes.
        let b = EdwardsPoint.base
        let xx = b.x.squared
        let yy = b.y.squared
        #expect((yy - xx - .one - .d * xx * yy).isZero)
        #expect(b.encoding == [0x58] + [UInt8](repeating: 0x66, count: 31))
    }

    @Test func canonicalEncodingReducesValuesAtOrAboveP() {
        // p + 3 reads as 3; p itself as 0.
        var pPlus3 = [UInt8](repeating: 0xFF, count: 32)
        pPlus3[0] = 0xF0
        pPlus3[31] = 0x7F
        #expect(pPlus3.withUnsafeBytes { FieldElement(bytes: $0) }.bytes == FieldElement(3).bytes)
        var p = pPlus3
        p[0] = 0xED
        #expect(p.withUnsafeBytes { FieldElement(bytes: $0) }.isZero)
    }

    @Test func scalarReductionMatchesBitByBitReduction() {
        var generator = SeededGenerator(seed: 7)
        var inputs = (0..<64).map { _ in [UInt8](generator.bytes(64)) }
        inputs.append([UInt8](repeating: 0xFF, count: 64))
        inputs.append(Self.bytes(Scalar25519.order))
        inputs.append(Self.bytes(Scalar25519.order.enumerated().map { $0.offset == 0 ? $0.element + 5 : $0.element }))
        inputs.append(Self.bytes(Scalar25519.order.enumerated().map { $0.offset == 0 ? $0.element - 1 : $0.element }))
        for input in inputs {
            #expect(Scalar25519.reduced(input) == Self.slowReduced(input))
        }
        #expect(Scalar25519.reduced(Self.bytes(Scalar25519.order)) == [0, 0, 0, 0])
    }

    @Test(arguments: [2, 4, 5, 6, 7, 8])
    func signedDigitsSumToTheScalar(bits: Int) {
        var generator = SeededGenerator(seed: UInt64(100 + bits))
        var scalars = (0..<32).map { _ in Scalar25519.reduced([UInt8](generator.bytes(64))) }
        // The largest scalars a verification writes: L - 1 and a canonical s
        // with every window at its top.
        scalars.append(Scalar25519.order.enumerated().map { $0.offset == 0 ? $0.element - 1 : $0.element })
        scalars.append([UInt64.max, UInt64.max, UInt64.max, (1 << 61) - 1])
        let half = 1 << (bits - 1)
        for words in scalars {
            let digits = Scalar25519.signedDigits(words, bits: bits)
            #expect(digits.count == (256 + bits - 1) / bits)
            #expect(digits.allSatisfy { (-half...half).contains(Int($0)) })
            // Σ digit·2^(bits·i), from the top digit down.
            var value: [UInt64] = [0, 0, 0, 0, 0]
            for digit in digits.reversed() {
                for _ in 0..<bits { value = Self.shiftedLeft1(value) }
                value = Self.adding(value, Int64(digit))
            }
            #expect(Array(value[0..<4]) == words && value[4] == 0, "bits \(bits)")
        }
    }

    @Test func radix16DigitsSumToTheScalar() {
        var generator = SeededGenerator(seed: 16)
        for _ in 0..<32 {
            let words = Scalar25519.reduced([UInt8](generator.bytes(64)))
            let digits = Scalar25519.radix16Digits(words)
            #expect(digits.allSatisfy { (-8...8).contains($0) })
            // Σ digit·16^i, evaluated from the top as a base-16 number with signed digits.
            var value: [UInt64] = [0, 0, 0, 0, 0]
            for digit in digits.reversed() {
                value = Self.shiftedLeft4(value)
                value = Self.adding(value, Int64(digit))
            }
            #expect(Array(value[0..<4]) == words && value[4] == 0)
        }
    }

    @Test func validSignaturesFromManyKeysVerifyAndTamperedOnesDoNot() throws {
        var generator = SeededGenerator(seed: 8032)
        for keyIndex in 0..<12 {
            let key = try Curve25519.Signing.PrivateKey(rawRepresentation: generator.bytes(32))
            let publicKey = key.publicKey.rawRepresentation
            let table = try #require(Ed25519KeyTable(publicKey: publicKey))
            for length in [0, 1, 64, 1000] {
                let message = generator.bytes(length + keyIndex)
                let signature = try key.signature(for: message)
                #expect(table.isValidSignature(signature, for: message), "key \(keyIndex), length \(length)")
                var flipped = signature
                let bit = Int.random(in: 0..<512, using: &generator)
                flipped[bit / 8] ^= UInt8(1 << (bit % 8))
                let verdict = Self.verdicts(key: publicKey, table: table, signature: flipped, message: message)
                #expect(verdict.table == verdict.swiftCrypto, "bit \(bit)")
                #expect(!verdict.table, "bit \(bit)")
                if !message.isEmpty {
                    var changed = message
                    changed[changed.startIndex] ^= 1
                    #expect(!table.isValidSignature(signature, for: changed))
                }
            }
        }
    }

    @Test func anSAtOrAboveTheOrderIsRefusedThoughTheEquationHolds() throws {
        let key = try Curve25519.Signing.PrivateKey(rawRepresentation: Data(repeating: 3, count: 32))
        let message = Data("s + L".utf8)
        let signature = try key.signature(for: message)
        // s + L < 2^254 fits in the four words.
        let sPlusL = Self.sum(Scalar25519.littleEndianWords(signature[32..<64]), Scalar25519.order).prefix(4)
        let malleable = signature[0..<32] + Data(Self.bytes(Array(sPlusL)))
        let verdict = Self.verdicts(key: key.publicKey.rawRepresentation, signature: malleable, message: message)
        #expect(!verdict.swiftCrypto && !verdict.table)
    }

    /// Small-order keys and R values, non-canonical encodings (y at or above
    /// p) and random bytes, each as key and as R with s = 0: where
    /// swift-crypto accepts (it does for some of these), so must the table.
    @Test func hostileKeysAndRsGetSwiftCryptosVerdict() throws {
        var encodings = Self.smallOrderEncodings.map { Data(hex: $0) }
        for offset in [0, 1, 2, 18] {
            // p + offset, both signs: y = offset read the long way (p + 1 is the identity's y).
            var bytes = [UInt8](repeating: 0xFF, count: 32)
            bytes[0] = 0xED + UInt8(offset)
            bytes[31] = 0x7F
            encodings.append(Data(bytes))
            bytes[31] = 0xFF
            encodings.append(Data(bytes))
        }
        var generator = SeededGenerator(seed: 666)
        for _ in 0..<8 { encodings.append(generator.bytes(32)) }
        var accepted = 0
        for key in encodings {
            let table = Ed25519KeyTable(publicKey: key)
            for r in encodings {
                let signature = r + Data(count: 32)
                let verdict = Self.verdicts(key: key, table: table, signature: signature, message: Data("m".utf8))
                #expect(verdict.table == verdict.swiftCrypto, "key \(key.hex) R \(r.hex)")
                if verdict.swiftCrypto { accepted += 1 }
            }
        }
        // The set holds signatures swift-crypto accepts, so the comparison covers both answers.
        #expect(accepted > 0)
    }

    /// A key with a small-order part (A' = [a]B + T) signs as its owner
    /// could: whether [k]A' hits R depends on k mod 8, so this checks that k
    /// is reduced mod L before it multiplies A', as BoringSSL does.
    @Test func aKeyWithASmallOrderPartGetsSwiftCryptosVerdict() throws {
        var generator = SeededGenerator(seed: 8)
        let torsion = try #require(EdwardsPoint(encoding: [UInt8](Data(hex: Self.smallOrderEncodings[4]))))
        let a = Scalar25519.reduced([UInt8](generator.bytes(64)))
        let mixedKey = Data((Self.baseMultiple(a) + torsion).encoding)
        let mixedTable = try #require(Ed25519KeyTable(publicKey: mixedKey))
        var verdicts: [Bool] = []
        for index in 0..<48 {
            let message = Data("message \(index)".utf8)
            let r = Scalar25519.reduced([UInt8](generator.bytes(64)))
            let rEncoding = Data(Self.baseMultiple(r).encoding)
            var hash = SHA512()
            hash.update(data: rEncoding)
            hash.update(data: mixedKey)
            hash.update(data: message)
            let k = Scalar25519.reduced(Array(hash.finalize()))
            let s = Scalar25519.reduced(Self.bytes(Self.product(k, a)))
            let sPlusR = Scalar25519.reduced(Self.bytes(Self.sum(s, r)))
            let signature = rEncoding + Data(Self.bytes(sPlusR))
            let verdict = Self.verdicts(key: mixedKey, table: mixedTable, signature: signature, message: message)
            #expect(verdict.table == verdict.swiftCrypto, "message \(index)")
            verdicts.append(verdict.swiftCrypto)
        }
        // About one in eight verifies (k ≡ 0 mod 8): both answers occur.
        #expect(verdicts.contains(true) && verdicts.contains(false))
    }

    // MARK: - Helpers

    /// [scalar]B, from the base table alone.
    static func baseMultiple(_ scalar: [UInt64]) -> EdwardsPoint {
        Ed25519KeyTable.combine(
            s: Scalar25519.signedDigits(scalar, bits: 8), k: [Int8](repeating: 0, count: 64),
            keyMultiples: Ed25519KeyTable.baseMultiples)
    }

    static func bytes(_ words: [UInt64]) -> [UInt8] {
        words.flatMap { word in (0..<8).map { UInt8(truncatingIfNeeded: word >> (8 * UInt64($0))) } }
    }

    /// Shift-and-subtract, one bit at a time: slow and plainly right.
    static func slowReduced(_ bytes: [UInt8]) -> [UInt64] {
        var r: [UInt64] = [0, 0, 0, 0, 0]
        let order = Scalar25519.order + [0]
        for byte in bytes.reversed() {
            for bit in stride(from: 7, through: 0, by: -1) {
                r = shiftedLeft1(r)
                r[0] |= UInt64((byte >> UInt8(bit)) & 1)
                if !isLess(r, order) { r = subtracting(r, order) }
            }
        }
        return Array(r[0..<4])
    }

    static func shiftedLeft1(_ words: [UInt64]) -> [UInt64] {
        words.indices.map { index in words[index] << 1 | (index > 0 ? words[index - 1] >> 63 : 0) }
    }

    static func shiftedLeft4(_ words: [UInt64]) -> [UInt64] {
        words.indices.map { index in words[index] << 4 | (index > 0 ? words[index - 1] >> 60 : 0) }
    }

    /// words + value (value may be negative), in two's complement over the words.
    static func adding(_ words: [UInt64], _ value: Int64) -> [UInt64] {
        let extended = [UInt64(bitPattern: value)] + Array(repeating: value < 0 ? .max : 0, count: words.count - 1)
        return Array(sum(words, extended).prefix(words.count))
    }

    static func isLess(_ a: [UInt64], _ b: [UInt64]) -> Bool {
        for index in a.indices.reversed() where a[index] != b[index] { return a[index] < b[index] }
        return false
    }

    static func subtracting(_ a: [UInt64], _ b: [UInt64]) -> [UInt64] {
        var result = a
        var borrow: UInt64 = 0
        for index in a.indices {
            let (difference1, overflow1) = a[index].subtractingReportingOverflow(b[index])
            let (difference2, overflow2) = difference1.subtractingReportingOverflow(borrow)
            result[index] = difference2
            borrow = (overflow1 ? 1 : 0) + (overflow2 ? 1 : 0)
        }
        return result
    }

    /// The 512-bit product of two 256-bit numbers.
    static func product(_ a: [UInt64], _ b: [UInt64]) -> [UInt64] {
        var result = [UInt64](repeating: 0, count: 8)
        for i in 0..<4 {
            var carry: UInt64 = 0
            for j in 0..<4 {
                let (high, low) = a[i].multipliedFullWidth(by: b[j])
                let (sum1, overflow1) = result[i + j].addingReportingOverflow(low)
                let (sum2, overflow2) = sum1.addingReportingOverflow(carry)
                result[i + j] = sum2
                carry = high &+ (overflow1 ? 1 : 0) &+ (overflow2 ? 1 : 0)
            }
            result[i + 4] = carry
        }
        return result
    }

    static func sum(_ a: [UInt64], _ b: [UInt64]) -> [UInt64] {
        var result = a + [0]
        var carry: UInt64 = 0
        for index in result.indices {
            let (sum1, overflow1) = result[index].addingReportingOverflow(index < b.count ? b[index] : 0)
            let (sum2, overflow2) = sum1.addingReportingOverflow(carry)
            result[index] = sum2
            carry = (overflow1 ? 1 : 0) + (overflow2 ? 1 : 0)
        }
        return result
    }
}

extension Data {
    fileprivate init(hex: String) {
        let digits = Array(hex.utf8)
        self.init(
            stride(from: 0, to: digits.count, by: 2).map { index in
                UInt8(String(decoding: digits[index..<index + 2], as: UTF8.self), radix: 16)!
            })
    }

    fileprivate var hex: String { Hex.encode(self) }
}
