import Foundation
import RallyCore
import RallyWire
import Testing

@Suite("TextCodec")
struct TextCodecTests {
    static let texts = [
        "", "hello", "héllo wörld", "👋🏽 family: 👨‍👩‍👧‍👦, flag: 🇺🇦", "line\nbreak\ttab", "nul\u{0}inside", "عربى 中文 русский",
        String(repeating: "long ", count: 5_000),
    ]

    @Test("text round trips", arguments: texts)
    func roundTrip(_ text: String) throws {
        let codec = TextCodec()
        let content = try codec.encode(text)
        #expect(content.content == Data(text.utf8))
        #expect(try codec.decode(content) == text)
        // And through the wire.
        let decoded = try FrameCodec.decode(
            WireEncodedContent.self, from: FrameCodec.encode(content) + Data([0x78, 0x01]), limit: .max)
        #expect(try codec.decode(decoded) == text)
    }

    @Test func encodingDescribesTheContent() throws {
        let content = try TextCodec().encode("hi")
        #expect(ContentTypeID(wire: content.type) == TextCodec.contentType)
        #expect(TextCodec.contentType.description == "xmtp.org/text:1.0")
        #expect(content.parameters == ["encoding": "UTF-8"])
        #expect(content.shouldPush)
        #expect(!content.hasCompression)
        #expect(TextCodec().summary(of: "hi") == "hi")
        #expect(TextCodec().fallback(for: "hi") == nil)
    }

    @Test(
        "invalid UTF-8 is malformed",
        arguments: [
            [0xFF], [0xC3], [0x61, 0x80], [0xC0, 0xAF], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80],
            [0xF0, 0x9F, 0x98],
        ] as [[UInt8]])
    func invalidUTF8(_ bytes: [UInt8]) {
        var content = WireEncodedContent()
        content.type = TextCodec.contentType.wire
        content.content = Data(bytes)
        #expect(throws: ContentError.malformed(contentType: "xmtp.org/text:1.0", reason: "not valid UTF-8")) {
            try TextCodec().decode(content)
        }
    }

    @Test func theEncodingParameterIsChecked() throws {
        var content = try TextCodec().encode("hi")
        content.parameters["encoding"] = "utf-8"
        #expect(try TextCodec().decode(content) == "hi")
        content.parameters = [:]
        #expect(try TextCodec().decode(content) == "hi")
        content.parameters["encoding"] = "UTF-16"
        #expect(throws: ContentError.malformed(contentType: "xmtp.org/text:1.0", reason: "unsupported encoding UTF-16"))
        {
            try TextCodec().decode(content)
        }
    }
}

/// A codec with a fallback, as a richer content type would have.
struct ExampleReactionCodec: ContentCodec {
    static let contentType = ContentTypeID(authority: "example.com", type: "reaction", major: 1, minor: 0)
    var contentType: ContentTypeID { Self.contentType }

    func encode(_ value: String) throws(ContentError) -> WireEncodedContent {
        guard value.count == 1 else { throw .malformed(contentType: contentType.description, reason: "one emoji") }
        var content = WireEncodedContent()
        content.type = contentType.wire
        content.content = Data(value.utf8)
        return content
    }

    func decode(_ content: WireEncodedContent) throws(ContentError) -> String {
        guard let text = String(validating: content.content, as: UTF8.self), text.count == 1 else {
            throw .malformed(contentType: contentType.description, reason: "one emoji")
        }
        return text
    }

    func fallback(for value: String) -> String? { "reacted \(value)" }
    func shouldPush(_ value: String) -> Bool { false }
    func summary(of value: String) -> String { "reaction \(value)" }
}

@Suite("CodecRegistry")
struct CodecRegistryTests {
    func content(type: String, bytes: Data = Data("x".utf8), fallback: String? = nil) -> WireEncodedContent {
        var content = WireEncodedContent()
        content.type = ContentTypeID(parsing: type)!.wire
        content.content = bytes
        if let fallback { content.fallback = fallback }
        return content
    }

    @Test func standardDecodesText() throws {
        let content = try CodecRegistry.standard.encode("héllo 👋", with: TextCodec())
        let decoded = CodecRegistry.standard.decode(content)
        #expect(decoded.isKnown)
        #expect(decoded.displayText == "héllo 👋")
        #expect(decoded.value as? String == "héllo 👋")
        #expect(decoded.contentType == TextCodec.contentType)
    }

    @Test func encodingThroughTheRegistryAppliesFallbackAndPush() throws {
        var registry = CodecRegistry()
        registry.register(ExampleReactionCodec())
        let reaction = try registry.encode("👍", with: ExampleReactionCodec())
        #expect(reaction.fallback == "reacted 👍")
        #expect(!reaction.shouldPush)
        let text = try registry.encode("hi", with: TextCodec())
        #expect(!text.hasFallback)
        #expect(text.shouldPush)
        #expect(throws: ContentError.malformed(contentType: "example.com/reaction:1.0", reason: "one emoji")) {
            try registry.encode("two", with: ExampleReactionCodec())
        }
    }

    @Test func anUnknownTypeShowsItsFallback() {
        let decoded = CodecRegistry.standard.decode(content(type: "example.com/poll:1.0", fallback: "A poll: lunch?"))
        #expect(!decoded.isKnown)
        #expect(decoded.value == nil)
        #expect(decoded.displayText == "A poll: lunch?")
        #expect(decoded.contentType.description == "example.com/poll:1.0")
    }

    @Test func anUnknownTypeWithoutFallbackShowsAPlaceholder() {
        let decoded = CodecRegistry.standard.decode(content(type: "example.com/poll:3.2"))
        #expect(!decoded.isKnown)
        #expect(decoded.value == nil)
        #expect(decoded.displayText == "[unsupported content: example.com/poll:3.2]")
    }

    @Test func anEmptyFallbackIsStillTheFallback() {
        let decoded = CodecRegistry.standard.decode(content(type: "example.com/poll:1.0", fallback: ""))
        #expect(decoded.displayText == "")
        #expect(!decoded.isKnown)
    }

    @Test func aHigherMinorVersionStillDecodes() throws {
        var content = try TextCodec().encode("from the future")
        content.type.versionMinor = 7
        let decoded = CodecRegistry.standard.decode(content)
        #expect(decoded.isKnown)
        #expect(decoded.displayText == "from the future")
        #expect(decoded.contentType.description == "xmtp.org/text:1.7")
        #expect(CodecRegistry.standard.codec(for: ContentTypeID(parsing: "xmtp.org/text:1.99")!) != nil)
    }

    @Test func aHigherMajorVersionIsUnknown() throws {
        var content = try TextCodec().encode("v2")
        content.type.versionMajor = 2
        content.fallback = "v2 text"
        let decoded = CodecRegistry.standard.decode(content)
        #expect(!decoded.isKnown)
        #expect(decoded.displayText == "v2 text")
        #expect(CodecRegistry.standard.codec(for: ContentTypeID(parsing: "xmtp.org/text:2.0")!) == nil)
    }

    @Test func undecodableKnownContentIsKeptAsUnknownWithItsFallback() {
        let bad = content(type: "xmtp.org/text:1.0", bytes: Data([0xFF, 0xFE]), fallback: "broken")
        let decoded = CodecRegistry.standard.decode(bad)
        #expect(!decoded.isKnown)
        #expect(decoded.value == nil)
        #expect(decoded.displayText == "broken")
        let noFallback = content(type: "xmtp.org/text:1.0", bytes: Data([0xFF]))
        #expect(CodecRegistry.standard.decode(noFallback).displayText == "[unsupported content: xmtp.org/text:1.0]")
    }

    @Test func aRegisteredCodecIsUsedAndTheStandardRegistryIsUnchanged() throws {
        var registry = CodecRegistry.standard
        registry.register(ExampleReactionCodec())
        let content = try registry.encode("🎉", with: ExampleReactionCodec())
        let decoded = registry.decode(content)
        #expect(decoded.isKnown)
        #expect(decoded.displayText == "reaction 🎉")
        #expect(decoded.value as? String == "🎉")
        // The shared standard registry is a value: it did not gain the codec.
        let elsewhere = CodecRegistry.standard.decode(content)
        #expect(!elsewhere.isKnown)
        #expect(elsewhere.displayText == "reacted 🎉")
    }

    @Test func contentWithoutATypeIsUnknown() {
        var content = WireEncodedContent()
        content.content = Data("x".utf8)
        let decoded = CodecRegistry.standard.decode(content)
        #expect(!decoded.isKnown)
        #expect(decoded.displayText == "[unsupported content: /:0.0]")
    }
}
