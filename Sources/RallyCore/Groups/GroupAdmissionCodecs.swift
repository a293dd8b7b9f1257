import Crypto
public import Foundation
public import RallyWire

/// `rally.dev/invite_join_pending:1.0`: the group put the joiner in its
/// approval queue (sent from the invite identity, like a join error).
public struct JoinPendingNoticeCodec: ContentCodec {
    public static let contentType = ContentTypeID(
        authority: "rally.dev", type: "invite_join_pending", major: 1, minor: 0)
    public var contentType: ContentTypeID { Self.contentType }
    /// Most approvers a notice names: a joiner keeps the list.
    public static let maxApprovers = 256
    public static let maxBodyBytes = 32 * 1024

    public init() {}

    /// The notice's message id: derived from the request id, so however
    /// many admins answer the same request, the joiner holds one notice.
    public static func messageID(forRequest requestID: Data) -> Data {
        Data(SHA256.hash(data: Data("rally-join-pending-v1".utf8) + requestID).prefix(16))
    }

    public func encode(_ value: WireJoinPendingNotice) throws(ContentError) -> WireEncodedContent {
        guard value.approvers.count <= Self.maxApprovers else {
            throw .tooLarge(size: value.approvers.count, limit: Self.maxApprovers)
        }
        return NomineeContent.encode(FrameCodec.encode(value), type: contentType, fallback: fallback(for: value))
    }

    public func decode(_ content: WireEncodedContent) throws(ContentError) -> WireJoinPendingNotice {
        guard content.content.count <= Self.maxBodyBytes else {
            throw .tooLarge(size: content.content.count, limit: Self.maxBodyBytes)
        }
        let notice = try ContentError.decoding(contentType) { () throws(FrameDecodingError) in
            try FrameCodec.decode(WireJoinPendingNotice.self, from: content.content, limit: Self.maxBodyBytes)
        }
        guard notice.approvers.count <= Self.maxApprovers else {
            throw .malformed(contentType: contentType.description, reason: "more than \(Self.maxApprovers) approvers")
        }
        return notice
    }

    public func fallback(for value: WireJoinPendingNotice) -> String? {
        "Waiting for approval: a moderator of the group will accept or decline your request to join"
    }
    public func shouldPush(_ value: WireJoinPendingNotice) -> Bool { true }
    public func summary(of value: WireJoinPendingNotice) -> String { fallback(for: value) ?? "" }
}

/// `rally.dev/group_support:1.0`: one message of a pending joiner's support
/// chat with the group's moderators and above.
public struct GroupSupportCodec: ContentCodec {
    public static let contentType = ContentTypeID(authority: "rally.dev", type: "group_support", major: 1, minor: 0)
    public var contentType: ContentTypeID { Self.contentType }
    public static let maxTextBytes = 4096
    public static let maxBodyBytes = maxTextBytes + 512

    public init() {}

    public func encode(_ value: WireGroupSupportMessage) throws(ContentError) -> WireEncodedContent {
        guard value.text.utf8.count <= Self.maxTextBytes else {
            throw .tooLarge(size: value.text.utf8.count, limit: Self.maxTextBytes)
        }
        return NomineeContent.encode(FrameCodec.encode(value), type: contentType, fallback: fallback(for: value))
    }

    public func decode(_ content: WireEncodedContent) throws(ContentError) -> WireGroupSupportMessage {
        guard content.content.count <= Self.maxBodyBytes else {
            throw .tooLarge(size: content.content.count, limit: Self.maxBodyBytes)
        }
        let message = try ContentError.decoding(contentType) { () throws(FrameDecodingError) in
            try FrameCodec.decode(WireGroupSupportMessage.self, from: content.content, limit: Self.maxBodyBytes)
        }
        guard message.text.utf8.count <= Self.maxTextBytes else {
            throw .tooLarge(size: message.text.utf8.count, limit: Self.maxTextBytes)
        }
        return message
    }

    public func fallback(for value: WireGroupSupportMessage) -> String? { "Member support: \(value.text)" }
    public func shouldPush(_ value: WireGroupSupportMessage) -> Bool { true }
    public func summary(of value: WireGroupSupportMessage) -> String { "member support message" }
}
