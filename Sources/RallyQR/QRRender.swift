import CompressNIO
public import Foundation
import NIOCore

extension QRCode {
    /// Quiet-zone widths the renderers accept. The spec asks for 4 modules;
    /// most phone scanners cope with 2, and more than 16 only wastes space.
    /// Values outside the range are clamped into it.
    public static let quietZoneRange = 0...16

    /// Pixels per module for `pngData`. 64 keeps the largest image
    /// ((177 + 2·16)·64 = 13 376 px square, about 22 MB of raw 1-bit rows)
    /// within reason. Values outside the range are clamped into it.
    public static let pngScaleRange = 1...64

    // MARK: Terminal

    /// The symbol as text, two module rows per line drawn with the half-block
    /// characters `▀`, `▄`, `█` and space; lines are joined by "\n" with no
    /// trailing newline, and all have `size + 2 * quietZone` characters.
    ///
    /// By default glyphs ("ink") mark *dark* modules, which assumes dark text
    /// on a light background. Terminals with a dark background and light
    /// text (the common default) need `invert: true`, which inks the *light*
    /// modules and quiet zone instead so the background shows through as the
    /// dark modules. If the total row count is odd, the bottom half of the
    /// last line is left blank in either mode.
    public func terminalText(quietZone: Int = 2, invert: Bool = false) -> String {
        let quiet = Self.clamp(quietZone, to: Self.quietZoneRange)
        let span = size + 2 * quiet
        func ink(_ x: Int, _ y: Int) -> Bool {
            guard y < span else { return false }
            return self[x - quiet, y - quiet] != invert
        }
        var lines: [String] = []
        lines.reserveCapacity((span + 1) / 2)
        for top in stride(from: 0, to: span, by: 2) {
            var line = ""
            line.unicodeScalars.reserveCapacity(span)
            for x in 0..<span {
                switch (ink(x, top), ink(x, top + 1)) {
                case (true, true): line.unicodeScalars.append("█")
                case (true, false): line.unicodeScalars.append("▀")
                case (false, true): line.unicodeScalars.append("▄")
                case (false, false): line.unicodeScalars.append(" ")
                }
            }
            lines.append(line)
        }
        return lines.joined(separator: "\n")
    }

    // MARK: PNG

    /// The symbol as a 1-bit grayscale PNG (dark modules black, light ones
    /// and the quiet zone white), `(size + 2 * quietZone) * scale` pixels
    /// square. `scale` is clamped to `pngScaleRange` and `quietZone` to
    /// `quietZoneRange`.
    public func pngData(scale: Int = 8, quietZone: Int = 4) -> Data {
        let scale = Self.clamp(scale, to: Self.pngScaleRange)
        let quiet = Self.clamp(quietZone, to: Self.quietZoneRange)
        let pixels = (size + 2 * quiet) * scale
        let rowBytes = (pixels + 7) / 8

        // Filter type 0 (none) per scanline: the image is mostly runs of
        // identical bytes and repeated rows, which deflate handles without
        // help from PNG's predictors.
        var raw = [UInt8]()
        raw.reserveCapacity((rowBytes + 1) * pixels)
        for moduleY in 0..<(size + 2 * quiet) {
            var row = [UInt8](repeating: 0, count: rowBytes + 1)
            for px in 0..<pixels where !self[px / scale - quiet, moduleY - quiet] {
                // Bit set = white at bit depth 1; leftmost pixel in the MSB.
                row[1 + px / 8] |= 0x80 >> UInt8(px % 8)
            }
            for _ in 0..<scale { raw.append(contentsOf: row) }
        }

        var png = Data(PNG.signature)
        var header = Data()
        header.appendBigEndian(UInt32(pixels))
        header.appendBigEndian(UInt32(pixels))
        header.append(contentsOf: [PNG.bitDepth, PNG.colorTypeGrayscale, 0, 0, 0])  // compression, filter, interlace
        PNG.appendChunk("IHDR", header, to: &png)
        PNG.appendChunk("IDAT", PNG.zlibCompress(raw), to: &png)
        PNG.appendChunk("IEND", Data(), to: &png)
        return png
    }

    private static func clamp(_ value: Int, to range: ClosedRange<Int>) -> Int {
        min(max(value, range.lowerBound), range.upperBound)
    }
}

/// The few pieces of the PNG format a bilevel image needs.
enum PNG {
    static let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
    static let bitDepth: UInt8 = 1
    static let colorTypeGrayscale: UInt8 = 0

    /// Length, type, data, then CRC-32 over type and data.
    static func appendChunk(_ type: String, _ data: Data, to png: inout Data) {
        precondition(type.utf8.count == 4, "PNG chunk types are four ASCII letters")
        var body = Data(type.utf8)
        body.append(data)
        png.appendBigEndian(UInt32(data.count))
        png.append(body)
        png.appendBigEndian(crc32(of: body))
    }

    /// CRC-32 as PNG (and zlib, gzip, ISO 3309) computes it: reflected
    /// polynomial 0xEDB88320, initial value and final XOR 0xFFFFFFFF; the
    /// check value of "123456789" is 0xCBF43926. CompressNIO keeps zlib's
    /// own `crc32` to itself, so this is the classic byte-at-a-time table.
    static func crc32(of data: Data) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in data {
            crc = crcTable[Int(UInt8(truncatingIfNeeded: crc) ^ byte)] ^ (crc >> 8)
        }
        return ~crc
    }

    /// `crcTable[n]` is the CRC of the single byte `n` (before the final XOR).
    static let crcTable: [UInt32] = (0...255).map { (n: UInt32) in
        var c = n
        for _ in 0..<8 { c = c & 1 == 1 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        return c
    }

    /// A zlib stream (what IDAT holds: RFC 1950, deflate with zlib's header
    /// and Adler-32 trailer, i.e. CompressNIO's `.zlib`, not its raw
    /// `.deflate`), at maximum compression since the images are small and
    /// written once.
    static func zlibCompress(_ input: [UInt8]) -> Data {
        var source = ByteBuffer(bytes: input)
        var packed = ByteBuffer()
        do {
            let deflater = try ZlibCompressor(
                algorithm: .zlib, configuration: ZlibConfiguration(compressionLevel: .bestCompression))
            // maxSize (deflateBound) is room for the whole stream in one call.
            packed.reserveCapacity(deflater.maxSize(from: source))
            try deflater.deflate(from: &source, to: &packed, flush: .finish)
        } catch {
            // Only running out of memory can fail here, and there is no
            // sensible image to return then.
            preconditionFailure("zlib deflate failed: \(error)")
        }
        return Data(packed.readableBytesView)
    }
}

extension Data {
    fileprivate mutating func appendBigEndian(_ value: UInt32) {
        append(contentsOf: [
            UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF),
        ])
    }
}
