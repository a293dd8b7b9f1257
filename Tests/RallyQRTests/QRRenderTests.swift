import CompressNIO
import Foundation
import NIOCore
import Testing

@testable import RallyQR

@Suite("QR rendering")
struct QRRenderTests {
    static let code = try! QRCode.encode("rally://join/render-test", correction: .medium)

    // MARK: Terminal

    @Test("terminal text shape", arguments: [0, 1, 2, 4])
    func terminalShape(_ quietZone: Int) {
        let code = Self.code
        let lines = code.terminalText(quietZone: quietZone).split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.count == (code.size + 2 * quietZone + 1) / 2)
        for line in lines { #expect(line.unicodeScalars.count == code.size + 2 * quietZone) }
        let glyphs = Set(lines.joined().unicodeScalars)
        #expect(glyphs.isSubset(of: Set("▀▄█ ".unicodeScalars)))
    }

    @Test func terminalTextEncodesEveryModule() {
        let code = Self.code
        let quiet = 2
        let lines = code.terminalText(quietZone: quiet).split(separator: "\n").map { Array($0.unicodeScalars) }
        for y in -quiet..<(code.size + quiet) {
            for x in -quiet..<(code.size + quiet) {
                let glyph = lines[(y + quiet) / 2][x + quiet]
                let inked =
                    (y + quiet) % 2 == 0 ? "▀█".unicodeScalars.contains(glyph) : "▄█".unicodeScalars.contains(glyph)
                #expect(inked == code[x, y], "module \(x),\(y)")
            }
        }
    }

    @Test func invertedTerminalTextInksTheLightModules() {
        let code = Self.code
        let normal = code.terminalText(quietZone: 3).split(separator: "\n").map { Array($0.unicodeScalars) }
        let inverted = code.terminalText(quietZone: 3, invert: true).split(separator: "\n").map {
            Array($0.unicodeScalars)
        }
        let swap: [Unicode.Scalar: Unicode.Scalar] = ["█": " ", " ": "█", "▀": "▄", "▄": "▀"]
        // size + 6 is odd, so the last line's lower half is padding and stays
        // blank in both modes.
        for (row, line) in normal.enumerated().dropLast() {
            #expect(line.map { swap[$0]! } == inverted[row])
        }
        #expect(normal.last!.allSatisfy { $0 == " " || $0 == "▀" })
        #expect(inverted.last!.allSatisfy { $0 == " " || $0 == "▀" })
        #expect(inverted.last!.first == "▀")  // the quiet zone is inked when inverted
    }

    @Test func terminalQuietZoneIsClamped() {
        #expect(Self.code.terminalText(quietZone: -3) == Self.code.terminalText(quietZone: 0))
        #expect(Self.code.terminalText(quietZone: 1_000) == Self.code.terminalText(quietZone: 16))
    }

    // MARK: PNG

    struct Chunk {
        let type: String
        let data: [UInt8]
        let crc: UInt32
    }

    static func chunks(of png: Data) throws -> [Chunk] {
        let bytes = [UInt8](png)
        var offset = 8
        var result: [Chunk] = []
        func uint32(at index: Int) -> UInt32 {
            bytes[index..<index + 4].reduce(0) { $0 << 8 | UInt32($1) }
        }
        while offset < bytes.count {
            try #require(offset + 12 <= bytes.count, "truncated chunk header")
            let length = Int(uint32(at: offset))
            try #require(offset + 12 + length <= bytes.count, "truncated chunk")
            let type = String(decoding: bytes[offset + 4..<offset + 8], as: UTF8.self)
            let data = Array(bytes[offset + 8..<offset + 8 + length])
            result.append(Chunk(type: type, data: data, crc: uint32(at: offset + 8 + length)))
            offset += 12 + length
        }
        return result
    }

    /// Bitwise CRC-32 (ISO 3309, as PNG uses it), independent of zlib's.
    static func crc32(_ bytes: some Sequence<UInt8>) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        }
        return ~crc
    }

    @Test("PNG structure", arguments: [(1, 0), (3, 2), (8, 4)])
    func pngStructure(scale: Int, quietZone: Int) throws {
        let code = Self.code
        let png = code.pngData(scale: scale, quietZone: quietZone)
        #expect(Array(png.prefix(8)) == [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
        let chunks = try Self.chunks(of: png)
        #expect(chunks.map(\.type) == ["IHDR", "IDAT", "IEND"])
        for chunk in chunks {
            #expect(chunk.crc == Self.crc32(Array(chunk.type.utf8) + chunk.data), "CRC of \(chunk.type)")
        }
        let header = chunks[0].data
        let side = (code.size + 2 * quietZone) * scale
        let width = header[0..<4].reduce(0) { $0 << 8 | Int($1) }
        let height = header[4..<8].reduce(0) { $0 << 8 | Int($1) }
        #expect(width == side)
        #expect(height == side)
        #expect(Array(header[8...]) == [1, 0, 0, 0, 0])  // 1-bit grayscale, no interlace
        #expect(chunks[2].data.isEmpty)

        // IDAT is a zlib stream (RFC 1950): CMF says deflate with a 32 KiB
        // window and CMF·256 + FLG is a multiple of 31.
        let idat = chunks[1].data
        #expect(idat[0] == 0x78)
        #expect((Int(idat[0]) << 8 | Int(idat[1])) % 31 == 0)

        // Inflate IDAT and check every pixel against the modules.
        let rowBytes = (side + 7) / 8
        var source = ByteBuffer(bytes: idat)
        var inflated = ByteBuffer()
        inflated.reserveCapacity((rowBytes + 1) * side)
        try ZlibDecompressor(algorithm: .zlib).inflate(from: &source, to: &inflated)
        #expect(source.readableBytes == 0)
        let raw = Array(inflated.readableBytesView)
        try #require(raw.count == (rowBytes + 1) * side)
        for py in 0..<side {
            let row = py * (rowBytes + 1)
            #expect(raw[row] == 0, "filter type of row \(py)")
            for px in 0..<side {
                let white = raw[row + 1 + px / 8] & (0x80 >> UInt8(px % 8)) != 0
                if white == code[px / scale - quietZone, py / scale - quietZone] {
                    Issue.record("pixel \(px),\(py) does not match its module")
                    return
                }
            }
        }
    }

    @Test func crc32MatchesKnownValues() {
        // The CRC-32 check value, and the CRC every PNG's IEND chunk carries.
        #expect(PNG.crc32(of: Data("123456789".utf8)) == 0xCBF4_3926)
        #expect(PNG.crc32(of: Data("IEND".utf8)) == 0xAE42_6082)
        #expect(PNG.crc32(of: Data()) == 0)
        var generator = SystemRandomNumberGenerator()
        for length in [1, 7, 100, 4_096] {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            #expect(PNG.crc32(of: Data(bytes)) == Self.crc32(bytes), "\(length) random bytes")
        }
    }

    @Test func pngEndsWithTheStandardIENDChunk() {
        let iend: [UInt8] = [0, 0, 0, 0, 0x49, 0x45, 0x4E, 0x44, 0xAE, 0x42, 0x60, 0x82]
        #expect(Array(Self.code.pngData().suffix(12)) == iend)
    }

    @Test func pngLimitsAreClamped() {
        let code = Self.code
        #expect(code.pngData(scale: 0, quietZone: -1) == code.pngData(scale: 1, quietZone: 0))
        #expect(code.pngData(scale: 65, quietZone: 17) == code.pngData(scale: 64, quietZone: 16))
        #expect(QRCode.pngScaleRange == 1...64)
        #expect(QRCode.quietZoneRange == 0...16)
    }
}
