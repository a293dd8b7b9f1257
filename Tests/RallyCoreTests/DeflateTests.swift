import Foundation
import RallyCore
import RallyTestSupport
import RallyWire
import Testing

enum Samples {
    static let text = Data(String(repeating: "The quick brown fox jumps over the lazy dog. ", count: 2_000).utf8)
    static let random: Data = {
        var generator = SeededGenerator(seed: 0xDEF1A7E)
        return generator.bytes(64 * 1024)
    }()
    static let tenMegabytesOfZeros = Data(count: 10 * 1024 * 1024)
    static let mebibyte = 1024 * 1024
}

struct FormatCase: Sendable, CustomTestStringConvertible {
    let format: Deflate.Format
    var testDescription: String { format == .raw ? "raw" : "gzip" }
    static let all = [FormatCase(format: .raw), FormatCase(format: .gzip)]
}

@Suite("Deflate")
struct DeflateTests {
    @Test("round trip", arguments: FormatCase.all, [Data(), Data("a".utf8), Samples.text, Samples.random])
    func roundTrip(_ format: FormatCase, input: Data) throws {
        for effort in [Deflate.Effort.smallest, .fastest] {
            let packed = Deflate.compress(input, format: format.format, effort: effort)
            #expect(!packed.isEmpty)
            let unpacked = try Deflate.decompress(packed, format: format.format, limit: Samples.mebibyte)
            #expect(unpacked == input)
        }
    }

    @Test func theSmallestEffortIsTheDefaultAndNoLargerThanTheFastest() {
        // Invite slugs (which a QR code must hold) use the default.
        let mixed = Samples.text.prefix(20_000) + Samples.random.prefix(20_000) + Samples.text.prefix(20_000)
        let smallest = Deflate.compress(mixed, effort: .smallest)
        #expect(Deflate.compress(mixed) == smallest)
        #expect(smallest.count < Deflate.compress(mixed, effort: .fastest).count)
    }

    @Test func repetitiveTextShrinks() {
        #expect(Deflate.compress(Samples.text).count < Samples.text.count / 20)
    }

    @Test func gzipHasItsMagicNumberAndRawDoesNot() {
        let gzip = Deflate.compress(Samples.text, format: .gzip)
        #expect(gzip.prefix(2) == Data([0x1F, 0x8B]))
        let raw = Deflate.compress(Samples.text, format: .raw)
        #expect(raw.prefix(2) != Data([0x1F, 0x8B]))
    }

    @Test func theFormatsAreNotInterchangeable() {
        let gzip = Deflate.compress(Samples.text, format: .gzip)
        #expect(throws: Deflate.Failure.corrupt) { try Deflate.decompress(gzip, format: .raw, limit: Samples.mebibyte) }
        let raw = Deflate.compress(Samples.text, format: .raw)
        #expect(throws: Deflate.Failure.corrupt) { try Deflate.decompress(raw, format: .gzip, limit: Samples.mebibyte) }
    }

    @Test("a decompression bomb exceeds the limit", arguments: FormatCase.all)
    func bomb(_ format: FormatCase) {
        let bomb = Deflate.compress(Samples.tenMegabytesOfZeros, format: format.format)
        #expect(bomb.count < 20 * 1024)
        #expect(throws: Deflate.Failure.exceedsLimit(limit: Samples.mebibyte)) {
            try Deflate.decompress(bomb, format: format.format, limit: Samples.mebibyte)
        }
    }

    @Test func theLimitIsInclusive() throws {
        let exact = Data(repeating: 7, count: 100_000)
        let packed = Deflate.compress(exact)
        #expect(try Deflate.decompress(packed, limit: 100_000) == exact)
        #expect(throws: Deflate.Failure.exceedsLimit(limit: 99_999)) { try Deflate.decompress(packed, limit: 99_999) }
        #expect(throws: Deflate.Failure.exceedsLimit(limit: 0)) { try Deflate.decompress(packed, limit: 0) }
    }

    @Test("every truncation is truncated or corrupt", arguments: FormatCase.all)
    func truncated(_ format: FormatCase) {
        let packed = Deflate.compress(Samples.text.prefix(5_000) + Samples.random.prefix(2_000), format: format.format)
        var truncatedCount = 0
        for length in 0..<packed.count {
            do throws(Deflate.Failure) {
                let out = try Deflate.decompress(packed.prefix(length), format: format.format, limit: Samples.mebibyte)
                Issue.record("prefix of \(length)/\(packed.count) bytes inflated to \(out.count) bytes")
            } catch .truncated {
                truncatedCount += 1
            } catch .corrupt {
            } catch {
                Issue.record("prefix \(length): unexpected \(error)")
            }
        }
        #expect(truncatedCount > packed.count / 2)
    }

    @Test func anEmptyInputIsTruncated() {
        #expect(throws: Deflate.Failure.truncated) { try Deflate.decompress(Data(), limit: 10) }
        #expect(throws: Deflate.Failure.truncated) { try Deflate.decompress(Data(), format: .gzip, limit: 10) }
    }

    @Test(
        "garbage is corrupt",
        arguments: FormatCase.all,
        [
            Data([0xFF, 0xFF, 0xFF, 0xFF]), Data("definitely not compressed".utf8),
            Data([0x1F, 0x8B, 0x09, 0x00]) + Data(repeating: 0, count: 20),
        ])
    func garbage(_ format: FormatCase, input: Data) {
        #expect(throws: Deflate.Failure.corrupt) {
            try Deflate.decompress(input, format: format.format, limit: Samples.mebibyte)
        }
    }

    @Test func aStoredBlockWithABadLengthCheckIsCorrupt() {
        // BFINAL=1, BTYPE=00 (stored), LEN=5, NLEN not its complement.
        let bytes = Data([0x01, 0x05, 0x00, 0x00, 0x00]) + Data("hello".utf8)
        #expect(throws: Deflate.Failure.corrupt) { try Deflate.decompress(bytes, limit: 100) }
    }

    @Test func aBadGzipChecksumIsCorrupt() {
        var gzip = Deflate.compress(Samples.text, format: .gzip)
        gzip[gzip.count - 5] ^= 0xFF  // inside the CRC-32 trailer
        #expect(throws: Deflate.Failure.corrupt) {
            try Deflate.decompress(gzip, format: .gzip, limit: Samples.mebibyte)
        }
    }

    @Test("trailing bytes after the stream are corrupt", arguments: FormatCase.all)
    func trailingGarbage(_ format: FormatCase) {
        let packed = Deflate.compress(Data("hello".utf8), format: format.format) + Data([0x00])
        #expect(throws: Deflate.Failure.corrupt) {
            try Deflate.decompress(packed, format: format.format, limit: Samples.mebibyte)
        }
    }

    @Test func seededGarbageNeverCrashesAndStaysWithinTheLimit() {
        var generator = SeededGenerator(seed: 0x6A7BA6E)
        for _ in 0..<2_000 {
            let input = generator.bytes(Int.random(in: 1...300, using: &generator))
            for format in [Deflate.Format.raw, .gzip] {
                do throws(Deflate.Failure) {
                    let out = try Deflate.decompress(input, format: format, limit: 4_096)
                    #expect(out.count <= 4_096)
                } catch {
                    // Any typed failure is acceptable for random input.
                }
            }
        }
    }

    @Test func bitFlipsNeverCrashOrExceedTheLimit() {
        let packed = Deflate.compress(Samples.text.prefix(3_000), format: .gzip)
        for bit in 0..<(packed.count * 8) {
            var flipped = packed
            flipped[bit / 8] ^= UInt8(1 << (bit % 8))
            do throws(Deflate.Failure) {
                let out = try Deflate.decompress(flipped, format: .gzip, limit: 4_096)
                // gzip carries a CRC and length: a flip that still inflates
                // must be in a header byte that does not affect the data.
                #expect(out == Samples.text.prefix(3_000), "bit \(bit)")
            } catch {}
        }
    }
}

@Suite("ContentCompression")
struct ContentCompressionTests {
    func textContent(_ text: String) throws -> WireEncodedContent { try TextCodec().encode(text) }

    static let longText = String(repeating: "compress me please, ", count: 400)

    @Test func largeContentIsCompressedAndDecodesThroughTheRegistry() throws {
        let plain = try textContent(Self.longText)
        let packed = ContentCompression.compressedIfUseful(plain)
        #expect(packed.hasCompression)
        #expect(packed.compression == .deflate)
        #expect(packed.content.count < plain.content.count)
        let restored = try ContentCompression.decompressed(packed)
        #expect(restored == plain)
        #expect(!restored.hasCompression)
        let decoded = CodecRegistry.standard.decode(packed)
        #expect(decoded.isKnown)
        #expect(decoded.displayText == Self.longText)
    }

    @Test func gzipContentDecodesThroughTheRegistry() throws {
        var content = try textContent(Self.longText)
        content.content = Deflate.compress(content.content, format: .gzip)
        content.compression = .gzip
        let decoded = CodecRegistry.standard.decode(content)
        #expect(decoded.isKnown)
        #expect(decoded.value as? String == Self.longText)
    }

    @Test func compressedContentSurvivesTheWire() throws {
        let packed = ContentCompression.compressedIfUseful(try textContent(Self.longText))
        let received = try FrameCodec.decode(WireEncodedContent.self, from: FrameCodec.encode(packed), limit: .max)
        #expect(CodecRegistry.standard.decode(received).displayText == Self.longText)
    }

    @Test func smallContentIsLeftAlone() throws {
        let plain = try textContent(String(repeating: "a", count: ContentCompression.threshold - 1))
        #expect(ContentCompression.compressedIfUseful(plain) == plain)
    }

    @Test func incompressibleContentIsLeftAlone() {
        var content = WireEncodedContent()
        content.content = Samples.random.prefix(4_096)
        #expect(ContentCompression.compressedIfUseful(content) == content)
    }

    @Test func alreadyCompressedContentIsNotCompressedAgain() throws {
        let once = ContentCompression.compressedIfUseful(try textContent(Self.longText))
        #expect(ContentCompression.compressedIfUseful(once) == once)
    }

    @Test func uncompressedContentIsReturnedAsIs() throws {
        let plain = try textContent("hi")
        #expect(try ContentCompression.decompressed(plain) == plain)
    }

    @Test func aBombIsTooLarge() throws {
        var content = try textContent("")
        content.content = Deflate.compress(Samples.tenMegabytesOfZeros)
        content.compression = .deflate
        let limit = ContentCompression.maxDecompressedBytes
        #expect(throws: ContentError.tooLarge(size: limit + 1, limit: limit)) {
            try ContentCompression.decompressed(content)
        }
    }

    @Test func aBombThroughTheRegistryIsKeptAsUnknownWithItsFallback() throws {
        var content = try textContent("")
        content.content = Deflate.compress(Samples.tenMegabytesOfZeros, format: .gzip)
        content.compression = .gzip
        content.fallback = "a very large text"
        let decoded = CodecRegistry.standard.decode(content)
        #expect(!decoded.isKnown)
        #expect(decoded.value == nil)
        #expect(decoded.displayText == "a very large text")
    }

    @Test func corruptCompressedContentIsMalformed() throws {
        var content = try textContent("")
        content.content = Data("not deflate at all".utf8)
        content.compression = .gzip
        #expect(
            throws: ContentError.malformed(contentType: "xmtp.org/text:1.0", reason: "not valid compressed data")
        ) { try ContentCompression.decompressed(content) }
        content.content = Deflate.compress(Data(Self.longText.utf8)).dropLast(3)
        content.compression = .deflate
        #expect(
            throws: ContentError.malformed(contentType: "xmtp.org/text:1.0", reason: "compressed data ends early")
        ) { try ContentCompression.decompressed(content) }
        content.fallback = "shown instead"
        #expect(CodecRegistry.standard.decode(content).displayText == "shown instead")
    }

    @Test func anUnknownCompressionIsUnsupported() throws {
        var content = try textContent("hi")
        content.compression = .UNRECOGNIZED(9)
        #expect(throws: ContentError.unsupportedCompression) { try ContentCompression.decompressed(content) }
        content.fallback = "hi (fallback)"
        let decoded = CodecRegistry.standard.decode(content)
        #expect(!decoded.isKnown)
        #expect(decoded.displayText == "hi (fallback)")
    }
}
