import Foundation
public import RallyWire

/// A group message deleting an earlier one: `rally.dev/delete_message:1.0`
/// (JSON `{messageID}`). Its author may delete their own messages,
/// moderators and above anyone's. With the group's `full_deletion`
/// preference on, every member's client removes the message; off, each
/// shows it as deleted.
public struct MessageDeletion: Sendable, Equatable, Codable {
    public let messageID: String

    public init(messageID: String) { self.messageID = messageID }
}

public struct MessageDeletionCodec: ContentCodec {
    public static let contentType = ContentTypeID(authority: "rally.dev", type: "delete_message", major: 1, minor: 0)
    public var contentType: ContentTypeID { Self.contentType }
    public static let maxBodyBytes = 128

    public init() {}

    public func encode(_ value: MessageDeletion) throws(ContentError) -> WireEncodedContent {
        try JSONContent.encode(value, type: contentType, limit: Self.maxBodyBytes, fallback: "deleted a message")
    }

    public func decode(_ content: WireEncodedContent) throws(ContentError) -> MessageDeletion {
        try JSONContent.decode(MessageDeletion.self, from: content, type: contentType, limit: Self.maxBodyBytes)
    }

    public func fallback(for value: MessageDeletion) -> String? { "deleted a message" }
    public func shouldPush(_ value: MessageDeletion) -> Bool { false }
    public func summary(of value: MessageDeletion) -> String { "deleted a message" }
}

/// A direct message from one member of a group to another, sent through
/// their inboxes: `rally.dev/group_direct:1.0` (JSON `{groupID, text}`). It
/// names the group so the recipient's client can hold it to that group's
/// `direct_messages` preference; one that the preference does not allow,
/// or from someone who is not a member, is dropped.
public struct GroupDirectMessage: Sendable, Equatable, Codable {
    public let groupID: String
    public let text: String

    public init(groupID: String, text: String) {
        self.groupID = groupID
        self.text = text
    }
}

public struct GroupDirectCodec: ContentCodec {
    public static let contentType = ContentTypeID(authority: "rally.dev", type: "group_direct", major: 1, minor: 0)
    public var contentType: ContentTypeID { Self.contentType }
    /// A direct message is a text: 64 KiB, with room for the group id.
    public static let maxBodyBytes = 64 * 1024 + 256

    public init() {}

    public func encode(_ value: GroupDirectMessage) throws(ContentError) -> WireEncodedContent {
        try JSONContent.encode(value, type: contentType, limit: Self.maxBodyBytes, fallback: value.text)
    }

    public func decode(_ content: WireEncodedContent) throws(ContentError) -> GroupDirectMessage {
        try JSONContent.decode(GroupDirectMessage.self, from: content, type: contentType, limit: Self.maxBodyBytes)
    }

    public func fallback(for value: GroupDirectMessage) -> String? { value.text }
    public func shouldPush(_ value: GroupDirectMessage) -> Bool { true }
    public func summary(of value: GroupDirectMessage) -> String { value.text }
}

/// Small JSON bodies with a hard size limit, both ways.
enum JSONContent {
    static func encode<T: Encodable>(
        _ value: T, type: ContentTypeID, limit: Int, fallback: String
    ) throws(ContentError) -> WireEncodedContent {
        var content = WireEncodedContent()
        content.type = type.wire
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            content.content = try encoder.encode(value)
        } catch {
            throw .malformed(contentType: type.description, reason: "\(error)")
        }
        guard content.content.count <= limit else { throw .tooLarge(size: content.content.count, limit: limit) }
        content.fallback = fallback
        return content
    }

    static func decode<T: Decodable>(
        _ type: T.Type, from content: WireEncodedContent, type contentType: ContentTypeID, limit: Int
    ) throws(ContentError) -> T {
        guard content.content.count <= limit else { throw .tooLarge(size: content.content.count, limit: limit) }
        do {
            return try JSONDecoder().decode(T.self, from: content.content)
        } catch {
            throw .malformed(contentType: contentType.description, reason: "not the expected JSON")
        }
    }
}
