import Crypto
public import Foundation
public import RallyCrypto
public import RallyWire

/// A group as this client knows it.
public struct GroupRecord: Sendable, Equatable {
    public enum Status: String, Sendable, Codable {
        /// Created locally; the create commit is not applied yet.
        case creating
        case active
        case removed
        case left
        /// The owner deleted the group; its messages are gone from here.
        case deleted
    }

    public let groupID: String
    public let topicID: String
    public var state: GroupState
    public var status: Status
    /// The topic's current access secret (ADR 0008); nil only for records
    /// made before topics needed one.
    public var accessSecret: Data?
    /// The epoch link of the current epoch, which entries this member
    /// publishes carry.
    public var epochLink = Data()
    /// The seq of the last control entry of the log this member read: the
    /// relay stores a commit only if it builds on it.
    public var lastControlSeq: UInt64 = 0
    /// Set when this device was shown a history the other members do not
    /// share; nothing is sent into the group from then on.
    public var divergence: String?

    public init(
        groupID: String, topicID: String, state: GroupState, status: Status, accessSecret: Data? = nil,
        epochLink: Data = Data(), lastControlSeq: UInt64 = 0, divergence: String? = nil
    ) {
        self.groupID = groupID
        self.topicID = topicID
        self.state = state
        self.status = status
        self.accessSecret = accessSecret
        self.epochLink = epochLink
        self.lastControlSeq = lastControlSeq
        self.divergence = divergence
    }

    /// A group's id names its topic: first 16 bytes of SHA-256 over
    /// "rally-group-id-v1" and the topic id, in hex. A welcome that pairs a
    /// group id with another topic is refused.
    public static func groupID(forTopicID topicID: String) -> String {
        Data(SHA256.hash(data: Data("rally-group-id-v1|\(topicID)".utf8)).prefix(16)).hexString
    }

    public var topicAccess: TopicAccess? {
        accessSecret.flatMap { try? TopicAccess(secret: SymmetricKey(data: $0)) }
    }

    public var topic: TopicName {
        // Topic ids are 64 lowercase hex digits, always a valid topic id.
        try! TopicName.group(topicID)
    }
}
