import Foundation
public import RallyWire

/// Content decoded from a message: either a value of a registered type, or
/// an unknown type kept with its fallback text (DESIGN.md, principle 6).
public struct DecodedContent: Sendable {
    public let contentType: ContentTypeID
    /// The decoded value, nil when the type is unknown or undecodable.
    public let value: (any Sendable)?
    /// What to show: the codec's summary for known types, else the sender's
    /// fallback text, else a neutral placeholder.
    public let displayText: String
    public let isKnown: Bool
}

/// Maps content types to codecs. Value type: build it once at start-up and
/// share it.
public struct CodecRegistry: Sendable {
    private var codecs: [String: any ContentCodec] = [:]

    public init() {}

    /// The codecs Rally ships.
    public static let standard: CodecRegistry = {
        var registry = CodecRegistry()
        registry.register(TextCodec())
        registry.register(GroupWelcomeCodec())
        registry.register(InviteJoinErrorCodec())
        registry.register(JoinRequestCodec())
        registry.register(VaultInvitationCodec())
        registry.register(VaultInvitationResponseCodec())
        registry.register(VaultAccessCodec())
        registry.register(VaultEmergencyRequestCodec())
        registry.register(JoinPendingNoticeCodec())
        registry.register(GroupSupportCodec())
        registry.register(GroupInvitationCodec())
        registry.register(ReactionCodec())
        registry.register(MessageDeletionCodec())
        registry.register(GroupDirectCodec())
        return registry
    }()

    public mutating func register(_ codec: some ContentCodec) {
        codecs[Self.key(codec.contentType)] = codec
    }

    public func codec(for type: ContentTypeID) -> (any ContentCodec)? {
        codecs[Self.key(type)]
    }

    public func encode<C: ContentCodec>(_ value: C.Value, with codec: C) throws(ContentError) -> WireEncodedContent {
        var content = try codec.encode(value)
        content.shouldPush = codec.shouldPush(value)
        if let fallback = codec.fallback(for: value) { content.fallback = fallback }
        return content
    }

    /// What ``decode(_:)`` gives for `content` just encoded from `value` by
    /// `codec`, without decoding it again (a welcome carries a whole
    /// group's state): the value and its summary when this registry decodes
    /// the type with that same codec, else what `decode` gives.
    func described<C: ContentCodec>(
        _ value: C.Value, encodedBy codec: C, as content: WireEncodedContent
    ) -> DecodedContent {
        guard codecs[Self.key(codec.contentType)] is C else { return decode(content) }
        return DecodedContent(
            contentType: codec.contentType, value: value, displayText: codec.summary(of: value), isKnown: true)
    }

    /// The content a home stores for a message whose content decoded to
    /// `value`: the codec's kept copy when it keeps less, else `content`.
    func keptContent(_ content: WireEncodedContent, decodedAs value: (any Sendable)?) -> WireEncodedContent {
        guard let value, let codec = codec(for: ContentTypeID(wire: content.type)) else { return content }
        return kept(value, by: codec) ?? content
    }

    private func kept<C: ContentCodec>(_ value: any Sendable, by codec: C) -> WireEncodedContent? {
        guard let value = value as? C.Value, let kept = codec.keptCopy(of: value) else { return nil }
        return try? encode(kept, with: codec)
    }

    /// Decodes content. Never throws for an unknown or undecodable type:
    /// those are kept and shown by their fallback.
    public func decode(_ content: WireEncodedContent) -> DecodedContent {
        let type = ContentTypeID(wire: content.type)
        let fallbackText = content.hasFallback ? content.fallback : "[unsupported content: \(type)]"
        guard let codec = codec(for: type) else {
            return DecodedContent(contentType: type, value: nil, displayText: fallbackText, isKnown: false)
        }
        do {
            let plain = try ContentCompression.decompressed(content)
            return try Self.open(plain, with: codec)
        } catch {
            return DecodedContent(contentType: type, value: nil, displayText: fallbackText, isKnown: false)
        }
    }

    private static func open<C: ContentCodec>(
        _ content: WireEncodedContent, with codec: C
    ) throws(ContentError)
        -> DecodedContent
    {
        let value = try codec.decode(content)
        return DecodedContent(
            contentType: ContentTypeID(wire: content.type), value: value, displayText: codec.summary(of: value),
            isKnown: true)
    }

    private static func key(_ type: ContentTypeID) -> String {
        "\(type.authority)/\(type.type):\(type.major)"
    }
}
