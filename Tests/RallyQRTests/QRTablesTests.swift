import Testing

@testable import RallyQR

@Suite("QR tables")
struct QRTablesTests {
    @Test func codewordTotalsMatchTheSpec() {
        let totals = [1: 26, 2: 44, 6: 172, 7: 196, 10: 346, 14: 581, 21: 1156, 27: 1828, 28: 1921, 35: 2876, 40: 3706]
        for (version, total) in totals { #expect(QRVersion.totalCodewords(of: version) == total, "version \(version)") }
        let remainders = [1: 0, 2: 7, 6: 7, 7: 0, 13: 0, 14: 3, 20: 3, 21: 4, 27: 4, 28: 3, 34: 3, 35: 0, 40: 0]
        for (version, bits) in remainders {
            #expect(QRVersion.dataModuleCount(of: version) % 8 == bits, "version \(version)")
        }
    }

    @Test("data module formula agrees with the drawn template", arguments: QRVersion.range)
    func dataModulesMatchTemplate(_ version: Int) {
        let matrix = QRMatrix(version: version)
        var free = 0
        for y in 0..<matrix.size {
            for x in 0..<matrix.size where !matrix.isFunction(x: x, y: y) { free += 1 }
        }
        #expect(free == QRVersion.dataModuleCount(of: version))
    }

    @Test func blockLayoutsFromTheSpec() {
        // 5-Q: 2 blocks of 15 data codewords and 2 of 16, 18 ECC each.
        let fiveQ = QRBlockLayout(version: 5, correction: .quartile)
        #expect([fiveQ.shortBlocks, fiveQ.shortBlockData, fiveQ.longBlocks, fiveQ.eccPerBlock] == [2, 15, 2, 18])
        // 40-L: 19 blocks of 118 and 6 of 119, 30 ECC each.
        let fortyL = QRBlockLayout(version: 40, correction: .low)
        #expect(
            [fortyL.shortBlocks, fortyL.shortBlockData, fortyL.longBlocks, fortyL.eccPerBlock] == [19, 118, 6, 30])
        // 1-H: a single block, 9 data + 17 ECC.
        let oneH = QRBlockLayout(version: 1, correction: .high)
        #expect([oneH.shortBlocks, oneH.shortBlockData, oneH.longBlocks, oneH.eccPerBlock] == [1, 9, 0, 17])
        // 40-H: 20 blocks of 15 and 61 of 16, 30 ECC each.
        let fortyH = QRBlockLayout(version: 40, correction: .high)
        #expect(
            [fortyH.shortBlocks, fortyH.shortBlockData, fortyH.longBlocks, fortyH.eccPerBlock] == [20, 15, 61, 30])
    }

    @Test func everyLayoutIsConsistent() {
        for version in QRVersion.range {
            var previous = 0
            for level in QRErrorCorrection.allCases {
                let layout = QRBlockLayout(version: version, correction: level)
                let used = layout.dataCodewords + layout.blockCount * layout.eccPerBlock
                #expect(used == QRVersion.totalCodewords(of: version), "\(version)-\(level)")
                #expect(layout.shortBlocks > 0)
                // Stronger levels always leave strictly less room for data.
                if previous > 0 { #expect(layout.dataCodewords < previous, "\(version)-\(level)") }
                previous = layout.dataCodewords
            }
        }
    }

    @Test func byteCapacitiesMatchTheSpec() {
        // Byte-mode capacity per version, levels L, M, Q, H.
        let table: [Int: [Int]] = [
            1: [17, 14, 11, 7], 2: [32, 26, 20, 14], 3: [53, 42, 32, 24], 4: [78, 62, 46, 34],
            5: [106, 84, 60, 44], 6: [134, 106, 74, 58], 7: [154, 122, 86, 64], 8: [192, 152, 108, 84],
            9: [230, 180, 130, 98], 10: [271, 213, 151, 119], 40: [2953, 2331, 1663, 1273],
        ]
        for (version, capacities) in table {
            let actual = QRErrorCorrection.allCases.map { QRCodewords.byteCapacity(version: version, correction: $0) }
            #expect(actual == capacities, "version \(version)")
        }
    }

    @Test func alignmentCentresAreEvenlySpaced() {
        for version in QRVersion.range {
            let centres = QRVersion.alignmentCenters(of: version)
            if version == 1 {
                #expect(centres.isEmpty)
                continue
            }
            #expect(centres.count == version / 7 + 2, "version \(version)")
            #expect(centres.first == 6)
            #expect(centres.last == QRVersion.size(of: version) - 7)
            let gaps = zip(centres.dropFirst(), centres).map { $0 - $1 }
            // Even gaps (so centres share the timing patterns' phase), all
            // equal except the first, which absorbs the rounding.
            #expect(gaps.allSatisfy { $0 % 2 == 0 }, "version \(version)")
            #expect(Set(gaps.dropFirst()).count <= 1, "version \(version)")
        }
    }
}
