import CZlib
import Foundation

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

    static func crc32(of data: Data) -> UInt32 {
        let crc = data.withUnsafeBytes { buffer in
            CZlib.crc32(0, buffer.bindMemory(to: Bytef.self).baseAddress, uInt(buffer.count))
        }
        return UInt32(truncatingIfNeeded: crc)
    }

    /// A zlib stream (what IDAT holds), at maximum compression since the
    /// images are small and written once.
    static func zlibCompress(_ input: [UInt8]) -> Data {
        var length = compressBound(uLong(input.count))
        var output = [UInt8](repeating: 0, count: Int(length))
        let status = input.withUnsafeBufferPointer { source in
            output.withUnsafeMutableBufferPointer { destination in
                compress2(destination.baseAddress, &length, source.baseAddress, uLong(source.count), Z_BEST_COMPRESSION)
            }
        }
        // compressBound guarantees the room, so only running out of memory
        // can fail here, and there is no sensible image to return then.
        precondition(status == Z_OK, "zlib compress2 failed with status \(status)")
        return Data(output[0..<Int(length)])
    }
}

extension Data {
    fileprivate mutating func appendBigEndian(_ value: UInt32) {
        append(contentsOf: [
            UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF),
        ])
    }
}
