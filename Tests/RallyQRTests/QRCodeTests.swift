import Foundation
import Testing

@testable import RallyQR

@Suite("QR encoding")
struct QRCodeTests {
    @Test func byteModeDataCodewords() {
        let codewords = QRCodewords.dataCodewords(for: Array("hello".utf8), version: 1, correction: .medium)
        // 0100 | 00000101 | 'h' 'e' 'l' 'l' 'o' | 0000 terminator, then pad.
        #expect(
            codewords == [
                0x40, 0x56, 0x86, 0x56, 0xC6, 0xC6, 0xF0, 0xEC, 0x11, 0xEC, 0x11, 0xEC, 0x11, 0xEC, 0x11, 0xEC,
            ])
    }

    @Test func aFullSymbolHasNoTerminatorOrPadding() {
        let payload = [UInt8](repeating: 0xA5, count: 14)  // exactly 1-M capacity: 124 of 128 bits
        let codewords = QRCodewords.dataCodewords(for: payload, version: 1, correction: .medium)
        #expect(codewords.count == 16)
        #expect(codewords.last == 0x50)  // low nibble of 0xA5, then the 4-bit terminator
    }

    @Test func interleavingTakesColumnsAcrossBlocks() {
        // 5-Q: blocks of 15, 15, 16, 16 data codewords.
        let layout = QRBlockLayout(version: 5, correction: .quartile)
        let data = (0..<62).map { UInt8($0) }
        let result = QRCodewords.interleaved(data: data, layout: layout)
        #expect(result.count == QRVersion.totalCodewords(of: 5))
        #expect(Array(result.prefix(8)) == [0, 15, 30, 46, 1, 16, 31, 47])
        // The long blocks' last codewords come after every block's 15th.
        #expect(Array(result[60..<62]) == [45, 61])
        let firstBlockECC = ReedSolomonEncoder(eccCount: 18).ecc(for: Array(data[0..<15]))
        #expect(result[62] == firstBlockECC[0])
        #expect(result[66] == firstBlockECC[1])
    }

    @Test func versionSelectionBoundaries() throws {
        #expect(try QRCode.encode([UInt8](repeating: 0x61, count: 14), correction: .medium).version == 1)
        #expect(try QRCode.encode([UInt8](repeating: 0x61, count: 15), correction: .medium).version == 2)
        #expect(try QRCode.encode([UInt8](), correction: .high).version == 1)
        #expect(try QRCode.encode([UInt8](repeating: 0x61, count: 17), correction: .low).version == 1)
        #expect(try QRCode.encode([UInt8](repeating: 0x61, count: 18), correction: .low).version == 2)
        let largest = try QRCode.encode([UInt8](repeating: 0x61, count: 2953), correction: .low)
        #expect(largest.version == 40)
        #expect(largest.size == 177)
    }

    @Test("too long for version 40", arguments: QRErrorCorrection.allCases)
    func tooLong(_ correction: QRErrorCorrection) {
        let limit = QRCode.byteCapacity(correction: correction)
        #expect(limit == [QRErrorCorrection.low: 2953, .medium: 2331, .quartile: 1663, .high: 1273][correction])
        #expect(throws: QRError.tooLong(bytes: limit + 1, limit: limit)) {
            try QRCode.encode([UInt8](repeating: 0x61, count: limit + 1), correction: correction)
        }
    }

    @Test func errorDescription() {
        let error = QRError.tooLong(bytes: 2954, limit: 2953)
        #expect(error.description.contains("2954"))
        #expect(error.description.contains("2953"))
    }

    @Test func theOverloadsAgree() throws {
        let text = "rally://join/AbC-_9"
        let fromString = try QRCode.encode(text)
        #expect(try QRCode.encode(Data(text.utf8)) == fromString)
        #expect(try QRCode.encode(Array(text.utf8), correction: .medium) == fromString)
        #expect(try QRCode.encode(text, correction: .high) != fromString)
        #expect(fromString.correction == .medium)
    }

    @Test("structure", arguments: [1, 2, 7, 14, 40])
    func structure(_ version: Int) throws {
        let payload = [UInt8](repeating: 0x7A, count: QRCodewords.byteCapacity(version: version, correction: .quartile))
        let code = try QRCode.encode(payload, correction: .quartile)
        #expect(code.version == version)
        let size = code.size
        #expect(size == 4 * version + 17)
        // Finder patterns: dark outer ring, light ring, dark core; light separator.
        for (left, top) in [(0, 0), (size - 7, 0), (0, size - 7)] {
            for dy in -1...7 {
                for dx in -1...7 {
                    let ring = max(abs(dx - 3), abs(dy - 3))
                    #expect(code[left + dx, top + dy] == (ring != 2 && ring != 4), "finder at \(left),\(top)")
                }
            }
        }
        // Timing patterns alternate, starting dark.
        for i in 8..<(size - 8) {
            #expect(code[i, 6] == (i % 2 == 0))
            #expect(code[6, i] == (i % 2 == 0))
        }
        #expect(code[8, size - 8])  // the dark module
        #expect(!code[-1, 0] && !code[size, size])

        // Both format copies carry the chosen level and mask.
        let expected = QRFormat.formatBits(correction: .quartile, mask: code.mask)
        var first = 0
        var second = 0
        let firstCopy = (0...5).map { (8, $0) } + [(8, 7), (8, 8), (7, 8)] + (9...14).map { (14 - $0, 8) }
        let secondCopy = (0...7).map { (size - 1 - $0, 8) } + (8...14).map { (8, size - 15 + $0) }
        for (bit, (x, y)) in firstCopy.enumerated() where code[x, y] { first |= 1 << bit }
        for (bit, (x, y)) in secondCopy.enumerated() where code[x, y] { second |= 1 << bit }
        #expect(first == expected)
        #expect(second == expected)

        if version >= 7 {
            var topRight = 0
            var bottomLeft = 0
            for bit in 0..<18 {
                if code[size - 11 + bit % 3, bit / 3] { topRight |= 1 << bit }
                if code[bit / 3, size - 11 + bit % 3] { bottomLeft |= 1 << bit }
            }
            #expect(topRight == QRFormat.versionBits(version: version))
            #expect(bottomLeft == topRight)
        }
    }

    @Test func theChosenMaskHasTheLowestPenalty() throws {
        let payload = Array("rally://join/penalty-check".utf8)
        let code = try QRCode.encode(payload, correction: .low)
        var template = QRMatrix(version: code.version)
        let layout = QRBlockLayout(version: code.version, correction: .low)
        template.placeCodewords(
            QRCodewords.interleaved(
                data: QRCodewords.dataCodewords(for: payload, version: code.version, correction: .low), layout: layout))
        let penalties = QRMask.all.map { mask in
            var candidate = template
            candidate.applyMask(mask)
            candidate.drawFormatInformation(correction: .low, mask: mask)
            return QRMask.penalty(candidate)
        }
        #expect(penalties[code.mask] == penalties.min())
        // Unmasking the chosen symbol gives back the template's data modules.
        for y in 0..<code.size {
            for x in 0..<code.size where !template.isFunction(x: x, y: y) {
                #expect((code[x, y] != QRMask.flips(code.mask, x: x, y: y)) == template[x, y])
            }
        }
    }

    @Test func penaltyRules() {
        // N1: a run of 5 costs 3, each extra module 1 more.
        #expect(QRMask.linePenalty([true, true, true, true, true, false]) == 3)
        #expect(QRMask.linePenalty([Bool](repeating: false, count: 8)) == 6)
        #expect(QRMask.linePenalty([true, false, true, false]) == 0)
        // N3: 1:1:3:1:1 with four light modules on one side (the symbol
        // edge counts as light).
        let finder = [true, false, true, true, true, false, true]
        #expect(QRMask.linePenalty(finder + [false, false, false, false]) == 40)
        #expect(QRMask.linePenalty(finder) == 40)
        #expect(QRMask.linePenalty([false, false, false, true] + finder + [true, false, false, false]) == 0)
        // N4: 10 per full 5 % away from half dark.
        #expect(QRMask.balancePenalty(dark: 50, total: 100) == 0)
        #expect(QRMask.balancePenalty(dark: 54, total: 100) == 0)
        #expect(QRMask.balancePenalty(dark: 55, total: 100) == 10)
        #expect(QRMask.balancePenalty(dark: 38, total: 100) == 20)
    }

    @Test func maskPatternsFromTheSpec() {
        // First rows of each mask over a 6-wide strip: true = flipped.
        func row(_ mask: Int, _ y: Int) -> String {
            String((0..<6).map { QRMask.flips(mask, x: $0, y: y) ? "1" : "0" })
        }
        #expect(row(0, 0) == "101010" && row(0, 1) == "010101")
        #expect(row(1, 0) == "111111" && row(1, 1) == "000000")
        #expect(row(2, 0) == "100100" && row(2, 1) == "100100")
        #expect(row(3, 0) == "100100" && row(3, 1) == "001001")
        #expect(row(4, 0) == "111000" && row(4, 2) == "000111")
        #expect(row(5, 0) == "111111" && row(5, 1) == "100000")
        #expect(row(6, 0) == "111111" && row(6, 1) == "111000")
        #expect(row(7, 0) == "101010" && row(7, 1) == "000111")
    }
}
