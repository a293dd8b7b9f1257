/// Appends bit fields most significant bit first, the order QR codewords use.
struct BitWriter {
    private(set) var bytes: [UInt8] = []
    private(set) var count = 0

    mutating func append(_ value: Int, bits: Int) {
        precondition(bits >= 0 && bits <= 31 && value >> bits == 0, "value does not fit its field")
        for shift in stride(from: bits - 1, through: 0, by: -1) {
            if count % 8 == 0 { bytes.append(0) }
            if (value >> shift) & 1 == 1 { bytes[bytes.count - 1] |= 0x80 >> UInt8(count % 8) }
            count += 1
        }
    }
}

/// Turns a payload into the final codeword sequence of one symbol.
enum QRCodewords {
    /// Mode indicator for 8-bit byte mode. Byte mode is used for everything:
    /// the payloads are short URLs where the denser alphanumeric and numeric
    /// modes would save little and could not hold lower-case letters anyway.
    static let byteModeIndicator = 0b0100

    /// Pad codewords fill unused capacity; the spec alternates these two so
    /// the filler does not form large uniform areas.
    static let padBytes: [UInt8] = [0xEC, 0x11]

    /// Largest byte-mode payload for a version and level.
    static func byteCapacity(version: Int, correction: QRErrorCorrection) -> Int {
        let dataBits = QRBlockLayout(version: version, correction: correction).dataCodewords * 8
        let payloadBits = dataBits - QRVersion.byteModeHeaderBits(for: version)
        // The count field caps it too, though no version actually hits this.
        return min(payloadBits / 8, (1 << QRVersion.byteCountBits(for: version)) - 1)
    }

    /// Smallest version whose capacity holds `byteCount` bytes, if any.
    static func smallestVersion(for byteCount: Int, correction: QRErrorCorrection) -> Int? {
        QRVersion.range.first { byteCapacity(version: $0, correction: correction) >= byteCount }
    }

    /// The data codewords: segment header, payload, terminator and padding.
    static func dataCodewords(for payload: [UInt8], version: Int, correction: QRErrorCorrection) -> [UInt8] {
        let capacity = QRBlockLayout(version: version, correction: correction).dataCodewords
        var writer = BitWriter()
        writer.append(byteModeIndicator, bits: 4)
        writer.append(payload.count, bits: QRVersion.byteCountBits(for: version))
        for byte in payload { writer.append(Int(byte), bits: 8) }
        precondition(writer.count <= capacity * 8, "payload exceeds the chosen version")
        // Terminator: up to four zero bits, fewer if the symbol is full.
        writer.append(0, bits: min(4, capacity * 8 - writer.count))
        writer.append(0, bits: (8 - writer.count % 8) % 8)
        var codewords = writer.bytes
        var pad = 0
        while codewords.count < capacity {
            codewords.append(padBytes[pad])
            pad ^= 1
        }
        return codewords
    }

    /// Splits data into blocks, appends each block's ECC, and interleaves
    /// them (all blocks' first data codewords, then all second ones, …, then
    /// the ECC codewords likewise) so a local smudge spreads its damage over
    /// many blocks instead of overwhelming one.
    static func interleaved(data: [UInt8], layout: QRBlockLayout) -> [UInt8] {
        precondition(data.count == layout.dataCodewords, "data does not fill the layout")
        let encoder = ReedSolomonEncoder(eccCount: layout.eccPerBlock)
        var dataBlocks: [[UInt8]] = []
        var eccBlocks: [[UInt8]] = []
        var start = 0
        for index in 0..<layout.blockCount {
            let block = Array(data[start..<start + layout.dataCount(ofBlock: index)])
            start += block.count
            dataBlocks.append(block)
            eccBlocks.append(encoder.ecc(for: block))
        }
        var result: [UInt8] = []
        result.reserveCapacity(data.count + layout.blockCount * layout.eccPerBlock)
        for column in 0...layout.shortBlockData {
            for block in dataBlocks where column < block.count { result.append(block[column]) }
        }
        for column in 0..<layout.eccPerBlock {
            for block in eccBlocks { result.append(block[column]) }
        }
        return result
    }
}
