import Foundation
public import RallyWire

/// A reaction to a message: which message, and the emoji.
public struct Reaction: Sendable, Equatable, Codable {
    /// Hex id of the message reacted to.
    public let messageID: String
    public let emoji: String

    public init(messageID: String, emoji: String) {
        self.messageID = messageID
        self.emoji = emoji
    }
}

/// `rally.dev/reaction:1.0` (JSON `{messageID, emoji}`). In a group it
/// falls under the `reactions` preference.
public struct ReactionCodec: ContentCodec {
    public static let contentType = ContentTypeID(authority: "rally.dev", type: "reaction", major: 1, minor: 0)
    public var contentType: ContentTypeID { Self.contentType }
    public static let maxBodyBytes = 256

    public init() {}

    public func encode(_ value: Reaction) throws(ContentError) -> WireEncodedContent {
        try JSONContent.encode(value, type: contentType, limit: Self.maxBodyBytes, fallback: "reacted \(value.emoji)")
    }

    public func decode(_ content: WireEncodedContent) throws(ContentError) -> Reaction {
        try JSONContent.decode(Reaction.self, from: content, type: contentType, limit: Self.maxBodyBytes)
    }

    public func fallback(for value: Reaction) -> String? { "reacted \(value.emoji)" }
    public func shouldPush(_ value: Reaction) -> Bool { false }
    public func summary(of value: Reaction) -> String { "reacted \(value.emoji)" }
}
