/// A square of modules being assembled, with a parallel record of which
/// modules belong to function patterns (and so are neither data nor masked).
/// Coordinates are x = column, y = row, origin top-left.
struct QRMatrix: Sendable {
    let version: Int
    let size: Int
    private(set) var dark: [Bool]
    private(set) var isFunction: [Bool]

    /// The function patterns of `version`, with format information reserved
    /// (drawn with placeholder bits until a mask is chosen).
    init(version: Int) {
        self.version = version
        size = QRVersion.size(of: version)
        dark = [Bool](repeating: false, count: size * size)
        isFunction = dark
        drawTimingPatterns()
        drawFinderPatterns()
        drawAlignmentPatterns()
        drawFormatInformation(correction: .medium, mask: 0)
        drawVersionInformation()
    }

    subscript(x: Int, y: Int) -> Bool { dark[y * size + x] }

    func isFunction(x: Int, y: Int) -> Bool { isFunction[y * size + x] }

    private mutating func setFunction(x: Int, y: Int, dark value: Bool) {
        dark[y * size + x] = value
        isFunction[y * size + x] = true
    }

    // MARK: Function patterns

    private mutating func drawTimingPatterns() {
        // Drawn across the whole symbol first; finders and alignment
        // patterns then overwrite their parts, and agree with the
        // alternation where they overlap it.
        for i in 0..<size {
            setFunction(x: 6, y: i, dark: i % 2 == 0)
            setFunction(x: i, y: 6, dark: i % 2 == 0)
        }
    }

    private mutating func drawFinderPatterns() {
        for (cx, cy) in [(3, 3), (size - 4, 3), (3, size - 4)] {
            // Concentric squares: 3×3 dark core, light ring, dark ring, then
            // the light separator ring (clipped at the symbol's edge).
            for dy in -4...4 {
                for dx in -4...4 {
                    let x = cx + dx
                    let y = cy + dy
                    guard (0..<size).contains(x), (0..<size).contains(y) else { continue }
                    let ring = max(abs(dx), abs(dy))
                    setFunction(x: x, y: y, dark: ring != 2 && ring != 4)
                }
            }
        }
    }

    private mutating func drawAlignmentPatterns() {
        let centers = QRVersion.alignmentCenters(of: version)
        guard let first = centers.first, let last = centers.last else { return }
        for cy in centers {
            for cx in centers {
                // These three would overlap the finder patterns.
                if (cx == first && cy == first) || (cx == first && cy == last) || (cx == last && cy == first) {
                    continue
                }
                for dy in -2...2 {
                    for dx in -2...2 {
                        setFunction(x: cx + dx, y: cy + dy, dark: max(abs(dx), abs(dy)) != 1)
                    }
                }
            }
        }
    }

    /// Both copies of the 15 format bits, plus the always-dark module.
    /// Bit 14 is the most significant; the placement follows the spec's
    /// figure so that each copy reads in the order decoders expect.
    mutating func drawFormatInformation(correction: QRErrorCorrection, mask: Int) {
        let bits = QRFormat.formatBits(correction: correction, mask: mask)
        func bit(_ i: Int) -> Bool { (bits >> i) & 1 == 1 }
        // Around the top-left finder: up column 8, then along row 8 leftwards.
        for i in 0...5 { setFunction(x: 8, y: i, dark: bit(i)) }
        setFunction(x: 8, y: 7, dark: bit(6))
        setFunction(x: 8, y: 8, dark: bit(7))
        setFunction(x: 7, y: 8, dark: bit(8))
        for i in 9...14 { setFunction(x: 14 - i, y: 8, dark: bit(i)) }
        // Second copy, split between the other two finders.
        for i in 0...7 { setFunction(x: size - 1 - i, y: 8, dark: bit(i)) }
        for i in 8...14 { setFunction(x: 8, y: size - 15 + i, dark: bit(i)) }
        setFunction(x: 8, y: size - 8, dark: true)
    }

    /// Two 6×3 copies of the 18 version bits (versions 7 and up only; smaller
    /// symbols are identified by their size alone).
    private mutating func drawVersionInformation() {
        guard version >= QRFormat.firstVersionWithVersionInformation else { return }
        let bits = QRFormat.versionBits(version: version)
        for i in 0..<18 {
            let value = (bits >> i) & 1 == 1
            let long = size - 11 + i % 3
            let short = i / 3
            setFunction(x: long, y: short, dark: value)
            setFunction(x: short, y: long, dark: value)
        }
    }

    // MARK: Data

    /// Places codeword bits in the spec's zigzag: two-module-wide columns
    /// from the right edge, alternately upwards and downwards, skipping
    /// function modules and the vertical timing column. Modules left over
    /// after the last codeword are remainder bits and stay light (masking
    /// still applies to them).
    mutating func placeCodewords(_ codewords: [UInt8]) {
        let totalBits = codewords.count * 8
        var bitIndex = 0
        var upward = true
        var right = size - 1
        while right >= 1 {
            if right == 6 { right = 5 }
            for step in 0..<size {
                let y = upward ? size - 1 - step : step
                for x in [right, right - 1] where !isFunction[y * size + x] {
                    if bitIndex < totalBits {
                        dark[y * size + x] = (codewords[bitIndex / 8] >> (7 - UInt8(bitIndex % 8))) & 1 == 1
                    }
                    bitIndex += 1
                }
            }
            upward.toggle()
            right -= 2
        }
        assert(bitIndex == QRVersion.dataModuleCount(of: version), "data module count disagrees with the template")
    }

    /// Flips every data module the mask pattern selects.
    mutating func applyMask(_ mask: Int) {
        for y in 0..<size {
            for x in 0..<size where !isFunction[y * size + x] && QRMask.flips(mask, x: x, y: y) {
                dark[y * size + x].toggle()
            }
        }
    }
}

/// The BCH-protected metadata fields.
enum QRFormat {
    static let firstVersionWithVersionInformation = 7

    /// Generator of the (15, 5) BCH code: x^10 + x^8 + x^5 + x^4 + x^2 + x + 1.
    static let formatGenerator = 0b101_0011_0111
    /// XORed onto the format bits so they can never be all light, whatever
    /// the level and mask.
    static let formatXorMask = 0b101_0100_0001_0010
    /// Generator of the (18, 6) BCH code: x^12 + x^11 + x^10 + x^9 + x^8 + x^5 + x^2 + 1.
    static let versionGenerator = 0b1_1111_0010_0101

    /// 15 bits: level (2), mask (3), BCH remainder (10), then XOR-masked.
    static func formatBits(correction: QRErrorCorrection, mask: Int) -> Int {
        precondition(QRMask.all.contains(mask), "mask out of range")
        let data = correction.formatIndicator << 3 | mask
        return (data << 10 | bchRemainder(data << 10, generator: formatGenerator)) ^ formatXorMask
    }

    /// 18 bits: version (6), BCH remainder (12).
    static func versionBits(version: Int) -> Int {
        version << 12 | bchRemainder(version << 12, generator: versionGenerator)
    }

    /// Remainder of polynomial division over GF(2).
    static func bchRemainder(_ value: Int, generator: Int) -> Int {
        let generatorDegree = degree(generator)
        var remainder = value
        while remainder != 0 && degree(remainder) >= generatorDegree {
            remainder ^= generator << (degree(remainder) - generatorDegree)
        }
        return remainder
    }

    private static func degree(_ value: Int) -> Int { Int.bitWidth - value.leadingZeroBitCount - 1 }
}
