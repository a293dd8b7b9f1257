import Foundation
import RallyWire
import Testing

@testable import RallyCore

/// A sender keeps a copy of what it sent, described from the value it
/// encoded instead of by decoding its own content again.
@Suite("Describing content just encoded")
struct CodecRegistryDescribeTests {
    @Test("is what decoding it gives, compressed or not, and unknown to a registry without its codec")
    func describedAsDecoded() throws {
        let registry = CodecRegistry.standard
        for text in ["hi", String(repeating: "long text compresses. ", count: 500)] {
            let content = ContentCompression.compressedIfUseful(try registry.encode(text, with: TextCodec()))
            let described = registry.described(text, encodedBy: TextCodec(), as: content)
            let decoded = registry.decode(content)
            #expect(described.contentType == decoded.contentType)
            #expect(described.displayText == decoded.displayText)
            #expect(described.isKnown && decoded.isKnown)
            #expect(described.value as? String == text)

            let bare = CodecRegistry()
            let unknown = bare.described(text, encodedBy: TextCodec(), as: content)
            #expect(!unknown.isKnown && unknown.value == nil)
            #expect(unknown.displayText == bare.decode(content).displayText)
        }
    }
}
