import Foundation
import RallyTestSupport
import RallyWire
import Testing

@testable import RallyCore

@Suite("Deflating a shared head once")
struct SharedHeadCompressionTests {
    /// Bytes like a welcome's: keys (random) and names (text) mixed.
    static func groupLike(_ seed: UInt64, members: Int) -> Data {
        var generator = SeededGenerator(seed: seed)
        var bytes = Data()
        for index in 0..<members {
            bytes += generator.bytes(64)
            bytes += Data("member \(index), added by the owner".utf8)
        }
        return bytes
    }

    @Test("a head stream followed by a whole stream inflates to both", arguments: [0, 1, 4095, 4096, 30_000])
    func headThenWholeStream(split: Int) throws {
        let bytes = Self.groupLike(7, members: 300)
        let head = Deflate.compressHead(bytes.prefix(split), effort: .fastest)
        let tail = Deflate.compress(bytes.dropFirst(split), format: .raw, effort: .fastest)
        #expect(try Deflate.decompress(head + tail, format: .raw, limit: bytes.count) == bytes)
        // The head alone is a stream that has not ended.
        #expect(throws: Deflate.Failure.truncated) { try Deflate.decompress(head, format: .raw, limit: bytes.count) }
    }

    @Test func contentsThatStartAlikeShareOneDeflatedHeadAndEachInflatesToItself() throws {
        let shared = Self.groupLike(1, members: 200)
        let contents = (0..<5).map { index in
            var content = WireEncodedContent()
            content.content =
                shared + Data("newcomer \(index) proof".utf8) + Self.groupLike(UInt64(100 + index), members: 1)
            return content
        }
        let packed = ContentCompression.compressedSharingHead(contents)
        // All five start with `shared` and "newcomer ".
        let head = Deflate.compressHead(shared + Data("newcomer ".utf8), effort: .fastest)
        for (plain, sent) in zip(contents, packed) {
            #expect(sent.compression == .deflate)
            #expect(sent.content.starts(with: head))
            #expect(sent.content.count < plain.content.count)
            #expect(try ContentCompression.decompressed(sent) == plain)
        }
    }

    @Test func contentsWithoutALongSharedHeadAreEachCompressedAsAlone() throws {
        let contents = (0..<3).map { index in
            var content = WireEncodedContent()
            content.content = Data("\(index)".utf8) + Self.groupLike(9, members: 100)
            return content
        }
        #expect(
            ContentCompression.compressedSharingHead(contents) == contents.map(ContentCompression.compressedIfUseful))
    }

    @Test func smallAndAlreadyCompressedContentsAreLeftAsTheyAreAndTheOthersStillShare() throws {
        let shared = Self.groupLike(2, members: 100)
        var small = WireEncodedContent()
        small.content = Data("hi".utf8)
        var compressedAlready = WireEncodedContent()
        compressedAlready.content = Deflate.compress(shared)
        compressedAlready.compression = .deflate
        var first = WireEncodedContent()
        first.content = shared + Data("a".utf8)
        var second = WireEncodedContent()
        second.content = shared + Data("b".utf8)
        let packed = ContentCompression.compressedSharingHead([small, first, compressedAlready, second])
        #expect(packed[0] == small)
        #expect(packed[2] == compressedAlready)
        #expect(try ContentCompression.decompressed(packed[1]) == first)
        #expect(try ContentCompression.decompressed(packed[3]) == second)
        #expect(packed[1].content.starts(with: Deflate.compressHead(shared, effort: .fastest)))
    }

    @Test("the shared start is found to the byte", arguments: [0, 1, 4095, 4096, 4097, 8191, 8192, 10_000])
    func commonPrefix(at difference: Int) {
        let a = Self.groupLike(3, members: 100)
        var b = a
        if difference < b.count { b[difference] ^= 0xFF }
        #expect(ContentCompression.commonPrefixCount(a, b, upTo: .max) == min(difference, a.count))
        #expect(ContentCompression.commonPrefixCount(a, b, upTo: 2) == min(difference, 2))
        #expect(ContentCompression.commonPrefixCount(a, a.prefix(5_000), upTo: .max) == 5_000)
    }
}
