import Crypto
public import Foundation
public import RallyWire

/// Why a join request failed, as the inviter's client reports it. Raw
/// values are the wire strings (snake_case, as Convos uses them).
public enum JoinErrorType: String, Sendable, Codable, CaseIterable {
    case conversationExpired = "conversation_expired"
    case conversationNotFound = "conversation_not_found"
    case inviteRevoked = "invite_revoked"
    case singleUseConsumed = "single_use_consumed"
    case genericFailure = "generic_failure"
    /// A moderator turned the joiner away from the approval queue.
    case requestRejected = "request_rejected"
    /// The invitation was withdrawn (or declined) before it was accepted:
    /// the seed's `JoinGroupResult.invitationRemoved`.
    case invitationRemoved = "invitation_removed"
    /// The group holds as many members as a welcome can carry: admitting
    /// this joiner would leave it a member without its welcome.
    case groupFull = "group_full"

    /// A type from a newer client that this one does not know is a generic
    /// failure (forward compatibility).
    public init(wire: String) {
        self = JoinErrorType(rawValue: wire) ?? .genericFailure
    }

    /// What the joiner is told.
    public var userMessage: String {
        switch self {
        case .conversationExpired, .conversationNotFound: "This conversation is no longer available"
        case .inviteRevoked: "This invite is no longer valid"
        case .singleUseConsumed: "This invite was already used by someone else"
        case .genericFailure: "Failed to join conversation"
        case .requestRejected: "A moderator of the group declined your request to join"
        case .invitationRemoved: "This invitation was withdrawn"
        case .groupFull: "This group is full"
        }
    }

    public static let guidance = "Ask the person who invited you for a new invite."

    /// What the joiner reads: the message and, where a new invite could
    /// help, the guidance. A moderator's refusal is final, and a full group
    /// is full for every invite.
    public var joinerMessage: String {
        switch self {
        case .requestRejected, .groupFull: "\(userMessage)."
        default: "\(userMessage). \(Self.guidance)"
        }
    }
}

/// The body of `rally.dev/invite_join_error:1.0`:
/// `{errorType, inviteTag, timestamp, reason?}`.
public struct InviteJoinError: Sendable, Equatable {
    /// The message id of the join error that answers a request: derived
    /// from the request id, so however many admins answer the same request,
    /// the joiner's inbox holds one error, and an answer replayed for a
    /// later request is told apart.
    public static func messageID(forRequest requestID: Data) -> Data {
        Data(SHA256.hash(data: Data("rally-join-error-v1".utf8) + requestID).prefix(16))
    }

    public var errorType: JoinErrorType {
        didSet { rawErrorType = errorType.rawValue }
    }
    /// The raw type as received, kept for logs when it was unknown.
    public var rawErrorType: String
    public var inviteTag: String
    public var timestamp: Date
    public var reason: String?

    public init(errorType: JoinErrorType, inviteTag: String, timestamp: Date, reason: String? = nil) {
        self.errorType = errorType
        self.rawErrorType = errorType.rawValue
        self.inviteTag = inviteTag
        self.timestamp = timestamp
        self.reason = reason
    }
}

public struct InviteJoinErrorCodec: ContentCodec {
    public static let contentType = ContentTypeID(authority: "rally.dev", type: "invite_join_error", major: 1, minor: 0)
    public var contentType: ContentTypeID { Self.contentType }
    /// Largest accepted body; real ones are about 150 bytes.
    public static let maxBodyBytes = 4096

    struct Body: Codable {
        var errorType: String
        var inviteTag: String
        var timestamp: String
        var reason: String?
    }

    public init() {}

    public func encode(_ value: InviteJoinError) throws(ContentError) -> WireEncodedContent {
        let body = Body(
            errorType: value.rawErrorType, inviteTag: value.inviteTag,
            timestamp: Self.formatter.string(from: value.timestamp), reason: value.reason)
        var content = WireEncodedContent()
        content.type = contentType.wire
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            content.content = try encoder.encode(body)
        } catch {
            throw .malformed(contentType: contentType.description, reason: "\(error)")
        }
        // What this client would refuse to decode, it does not send.
        guard content.content.count <= Self.maxBodyBytes else {
            throw .tooLarge(size: content.content.count, limit: Self.maxBodyBytes)
        }
        return content
    }

    public func decode(_ content: WireEncodedContent) throws(ContentError) -> InviteJoinError {
        guard content.content.count <= Self.maxBodyBytes else {
            throw .tooLarge(size: content.content.count, limit: Self.maxBodyBytes)
        }
        let body: Body
        do {
            body = try JSONDecoder().decode(Body.self, from: content.content)
        } catch {
            throw .malformed(contentType: contentType.description, reason: "not the expected JSON")
        }
        guard
            let timestamp = Self.formatter.date(from: body.timestamp) ?? Self.plainFormatter.date(from: body.timestamp)
        else {
            throw .malformed(contentType: contentType.description, reason: "timestamp is not ISO 8601")
        }
        var error = InviteJoinError(
            errorType: JoinErrorType(wire: body.errorType), inviteTag: body.inviteTag, timestamp: timestamp,
            reason: body.reason)
        error.rawErrorType = body.errorType
        return error
    }

    public func fallback(for value: InviteJoinError) -> String? {
        value.errorType.joinerMessage
    }

    public func shouldPush(_ value: InviteJoinError) -> Bool { true }

    public func summary(of value: InviteJoinError) -> String {
        value.errorType.joinerMessage
    }

    nonisolated(unsafe) static let formatter: ISO8601DateFormatter = {
        // Configured once, then only used to format and parse, which
        // ISO8601DateFormatter does thread-safely.
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter
    }()

    nonisolated(unsafe) static let plainFormatter = ISO8601DateFormatter()
}
