/// How much of a symbol is spent on Reed–Solomon redundancy, i.e. how much
/// damage it survives: roughly 7 % (L), 15 % (M), 25 % (Q) and 30 % (H) of
/// its codewords can be lost.
public enum QRErrorCorrection: Sendable, Hashable, CaseIterable, CustomStringConvertible {
    case low
    case medium
    case quartile
    case high

    public var description: String {
        switch self {
        case .low: "L"
        case .medium: "M"
        case .quartile: "Q"
        case .high: "H"
        }
    }

    /// The two-bit indicator in the format information. The spec's order
    /// (L=01, M=00, Q=11, H=10) is deliberately not the order of strength.
    var formatIndicator: Int {
        switch self {
        case .low: 0b01
        case .medium: 0b00
        case .quartile: 0b11
        case .high: 0b10
        }
    }

    /// Column in the per-level tables below.
    var tableIndex: Int {
        switch self {
        case .low: 0
        case .medium: 1
        case .quartile: 2
        case .high: 3
        }
    }
}

/// The versions (symbol sizes) the standard defines, and the per-version
/// facts the encoder needs.
enum QRVersion {
    static let range = 1...40

    /// Every version adds four modules per side to the 21 of version 1.
    static func size(of version: Int) -> Int { 4 * version + 17 }

    /// Byte mode's character count field grows with the symbol so that large
    /// symbols can announce payloads over 255 bytes. (Versions 27–40 keep 16
    /// bits in byte mode; only the other modes widen again.)
    static func byteCountBits(for version: Int) -> Int { version <= 9 ? 8 : 16 }

    /// Byte-mode segment header: 4-bit mode indicator plus the count field.
    static func byteModeHeaderBits(for version: Int) -> Int { 4 + byteCountBits(for: version) }

    /// Modules left for codewords once every function pattern is drawn. The
    /// terms mirror the drawing code: three finders with separators (8×8
    /// each), both copies of the format information plus the dark module,
    /// the two timing lines between the separators, the alignment patterns
    /// (less the timing modules they cover), and the version information.
    /// A test cross-checks this against the drawn template for every version.
    static func dataModuleCount(of version: Int) -> Int {
        let size = size(of: version)
        var function = 3 * 64 + 2 * 15 + 1 + 2 * (size - 16)
        let perAxis = alignmentCenters(of: version).count
        if perAxis > 0 {
            // Three corner positions collide with finders and are skipped;
            // each pattern on row or column 6 sits on five timing modules.
            function += 25 * (perAxis * perAxis - 3) - 2 * 5 * (perAxis - 2)
        }
        if version >= 7 { function += 2 * 18 }
        return size * size - function
    }

    /// All codewords (data plus error correction). Any leftover modules
    /// (0, 3, 4 or 7 depending on the version) are remainder bits.
    static func totalCodewords(of version: Int) -> Int { dataModuleCount(of: version) / 8 }

    /// Row/column coordinates of alignment pattern centres (ISO/IEC 18004
    /// Annex E). Patterns sit at every pairing of these, except the three
    /// pairings that would land on a finder pattern.
    static func alignmentCenters(of version: Int) -> [Int] { alignmentTable[version - 1] }

    private static let alignmentTable: [[Int]] = [
        [], [6, 18], [6, 22], [6, 26], [6, 30], [6, 34],
        [6, 22, 38], [6, 24, 42], [6, 26, 46], [6, 28, 50], [6, 30, 54], [6, 32, 58], [6, 34, 62],
        [6, 26, 46, 66], [6, 26, 48, 70], [6, 26, 50, 74], [6, 30, 54, 78], [6, 30, 56, 82], [6, 30, 58, 86],
        [6, 34, 62, 90],
        [6, 28, 50, 72, 94], [6, 26, 50, 74, 98], [6, 30, 54, 78, 102], [6, 28, 54, 80, 106],
        [6, 32, 58, 84, 110], [6, 30, 58, 86, 114], [6, 34, 62, 90, 118],
        [6, 26, 50, 74, 98, 122], [6, 30, 54, 78, 102, 126], [6, 26, 52, 78, 104, 130],
        [6, 30, 56, 82, 108, 134], [6, 34, 60, 86, 112, 138], [6, 30, 58, 86, 114, 142],
        [6, 34, 62, 90, 118, 146],
        [6, 30, 54, 78, 102, 126, 150], [6, 24, 50, 76, 102, 128, 154], [6, 28, 54, 80, 106, 132, 158],
        [6, 32, 58, 84, 110, 136, 162], [6, 26, 54, 82, 110, 138, 166], [6, 30, 58, 86, 114, 142, 170],
    ]
}

/// How one version/level splits its codewords into Reed–Solomon blocks.
///
/// The spec's table lists one or two block groups per version and level; in
/// every entry the second group's blocks carry exactly one more data codeword
/// than the first's and all blocks share one ECC length. So the whole table
/// follows from two numbers per entry (ECC codewords per block, block count)
/// plus the version's codeword total, which is what is stored here.
struct QRBlockLayout: Equatable, Sendable {
    let eccPerBlock: Int
    let shortBlocks: Int
    let shortBlockData: Int
    /// Blocks with `shortBlockData + 1` data codewords; they come last.
    let longBlocks: Int

    init(version: Int, correction: QRErrorCorrection) {
        let level = correction.tableIndex
        eccPerBlock = Self.eccPerBlock[level][version - 1]
        let blocks = Self.blockCount[level][version - 1]
        let data = QRVersion.totalCodewords(of: version) - eccPerBlock * blocks
        shortBlockData = data / blocks
        longBlocks = data % blocks
        shortBlocks = blocks - longBlocks
    }

    var blockCount: Int { shortBlocks + longBlocks }
    var dataCodewords: Int { shortBlocks * shortBlockData + longBlocks * (shortBlockData + 1) }

    func dataCount(ofBlock index: Int) -> Int { index < shortBlocks ? shortBlockData : shortBlockData + 1 }

    // Rows: L, M, Q, H. Columns: versions 1–40.
    private static let eccPerBlock: [[Int]] = [
        [
            7, 10, 15, 20, 26, 18, 20, 24, 30, 18, 20, 24, 26, 30, 22, 24, 28, 30, 28, 28,
            28, 28, 30, 30, 26, 28, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30,
        ],
        [
            10, 16, 26, 18, 24, 16, 18, 22, 22, 26, 30, 22, 22, 24, 24, 28, 28, 26, 26, 26,
            26, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28,
        ],
        [
            13, 22, 18, 26, 18, 24, 18, 22, 20, 24, 28, 26, 24, 20, 30, 24, 28, 28, 26, 30,
            28, 30, 30, 30, 30, 28, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30,
        ],
        [
            17, 28, 22, 16, 22, 28, 26, 26, 24, 28, 24, 28, 22, 24, 24, 30, 28, 28, 26, 28,
            30, 24, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30,
        ],
    ]

    private static let blockCount: [[Int]] = [
        [
            1, 1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 4, 4, 6, 6, 6, 6, 7, 8,
            8, 9, 9, 10, 12, 12, 12, 13, 14, 15, 16, 17, 18, 19, 19, 20, 21, 22, 24, 25,
        ],
        [
            1, 1, 1, 2, 2, 4, 4, 4, 5, 5, 5, 8, 9, 9, 10, 10, 11, 13, 14, 16,
            17, 17, 18, 20, 21, 23, 25, 26, 28, 29, 31, 33, 35, 37, 38, 40, 43, 45, 47, 49,
        ],
        [
            1, 1, 2, 2, 4, 4, 6, 6, 8, 8, 8, 10, 12, 16, 12, 17, 16, 18, 21, 20,
            23, 23, 25, 27, 29, 34, 34, 35, 38, 40, 43, 45, 48, 51, 53, 56, 59, 62, 65, 68,
        ],
        [
            1, 1, 2, 4, 4, 4, 5, 6, 8, 8, 11, 11, 16, 16, 18, 16, 19, 21, 25, 25,
            25, 34, 30, 32, 35, 37, 40, 42, 45, 48, 51, 54, 57, 60, 63, 66, 70, 74, 77, 81,
        ],
    ]
}
