import Testing

@testable import RallyQR

@Suite("Reed–Solomon and BCH")
struct ReedSolomonTests {
    @Test func fieldTablesAreInverse() {
        #expect(GF256.exp[0] == 1)
        #expect(GF256.exp[8] == 0x1D)  // α^8 = x^4 + x^3 + x^2 + 1
        #expect(GF256.exp[255] == 1)
        #expect(Set(GF256.exp[0..<255]).count == 255)  // α generates every non-zero byte
        for value in 1...255 {
            #expect(GF256.exp[GF256.log[value]] == UInt8(value))
        }
    }

    @Test func tableMultiplicationMatchesShiftAndAdd() {
        // Carry-less multiplication with reduction, bit by bit.
        func reference(_ a: UInt8, _ b: UInt8) -> UInt8 {
            var product = 0
            var a = Int(a)
            var b = Int(b)
            while b != 0 {
                if b & 1 == 1 { product ^= a }
                a <<= 1
                if a & 0x100 != 0 { a ^= 0x11D }
                b >>= 1
            }
            return UInt8(product)
        }
        for a in UInt8.min...UInt8.max {
            for b in UInt8.min...UInt8.max where GF256.multiply(a, b) != reference(a, b) {
                Issue.record("\(a) · \(b)")
            }
        }
    }

    @Test func generatorPolynomialOfDegreeSeven() {
        // (x − α^0)…(x − α^6), written as α exponents: the spec's Annex A.
        let exponents = ReedSolomonEncoder(eccCount: 7).generator.map { GF256.log[Int($0)] }
        #expect(exponents == [0, 87, 229, 146, 149, 238, 102, 21])
    }

    @Test func helloWorldOneM() {
        // The well-known version 1-M "HELLO WORLD" symbol (alphanumeric
        // mode; only its codewords matter here).
        let data: [UInt8] = [32, 91, 11, 120, 209, 114, 220, 77, 67, 64, 236, 17, 236, 17, 236, 17]
        let ecc = ReedSolomonEncoder(eccCount: 10).ecc(for: data)
        #expect(ecc == [196, 35, 39, 119, 235, 215, 231, 226, 93, 23])
    }

    @Test func codewordsPlusEccAreDivisibleByTheGenerator() {
        // A valid codeword polynomial vanishes at every generator root.
        let data: [UInt8] = Array("rally://join/abc".utf8)
        let encoder = ReedSolomonEncoder(eccCount: 22)
        let codeword = data + encoder.ecc(for: data)
        for root in 0..<22 {
            var value: UInt8 = 0
            for coefficient in codeword { value = GF256.multiply(value, GF256.exp[root]) ^ coefficient }
            #expect(value == 0, "non-zero at α^\(root)")
        }
    }

    @Test(
        "format information",
        arguments: [
            (QRErrorCorrection.medium, 0, "101010000010010"),
            (.low, 0, "111011111000100"),
            (.low, 4, "110011000101111"),
            (.quartile, 0, "011010101011111"),
            (.high, 0, "001011010001001"),
        ])
    func formatInformation(_ correction: QRErrorCorrection, mask: Int, expected: String) {
        #expect(QRFormat.formatBits(correction: correction, mask: mask) == Int(expected, radix: 2))
    }

    @Test func formatInformationCodewordsAreDistant() {
        // The BCH code guarantees a minimum distance of 7 between the 32
        // format words, which is what lets decoders correct 3 bit errors.
        let words = QRErrorCorrection.allCases.flatMap { level in
            QRMask.all.map { QRFormat.formatBits(correction: level, mask: $0) }
        }
        #expect(Set(words).count == 32)
        for (i, a) in words.enumerated() {
            for b in words[(i + 1)...] { #expect((a ^ b).nonzeroBitCount >= 7) }
        }
    }

    @Test func versionInformation() {
        #expect(QRFormat.versionBits(version: 7) == Int("000111110010010100", radix: 2))
        #expect(QRFormat.versionBits(version: 40) == Int("101000110001101001", radix: 2))
        for version in 7...40 {
            let bits = QRFormat.versionBits(version: version)
            #expect(bits >> 12 == version)
            #expect(QRFormat.bchRemainder(bits, generator: QRFormat.versionGenerator) == 0)
        }
    }
}
