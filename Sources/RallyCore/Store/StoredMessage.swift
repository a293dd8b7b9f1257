import Foundation
import GRDB
import RallyCrypto

/// A message as the local store keeps it.
public struct StoredMessage: Sendable, Equatable, Codable {
    /// Hex of the 16-byte message id chosen by the sender.
    public let id: String
    /// The peer's inbox id for a direct message; the group id for a group.
    public let conversation: String
    public let outgoing: Bool
    public let sender: InboxID
    public let senderName: String
    public let sentAt: Date
    public let receivedAt: Date
    public let topic: String
    public let seq: UInt64?
    public let contentType: String
    /// The serialized `EncodedContent`, kept whole so a later version that
    /// knows the type can decode it.
    public let encodedContent: Data
    public let displayText: String
    public let isKnownType: Bool

    public init(
        id: String, conversation: String, outgoing: Bool, sender: InboxID, senderName: String, sentAt: Date,
        receivedAt: Date, topic: String, seq: UInt64?, contentType: String, encodedContent: Data,
        displayText: String, isKnownType: Bool
    ) {
        self.id = id
        self.conversation = conversation
        self.outgoing = outgoing
        self.sender = sender
        self.senderName = senderName
        self.sentAt = sentAt
        self.receivedAt = receivedAt
        self.topic = topic
        self.seq = seq
        self.contentType = contentType
        self.encodedContent = encodedContent
        self.displayText = displayText
        self.isKnownType = isKnownType
    }

    init(row: Row) throws {
        let senderText: String = row["sender"]
        let seq: Int64? = row["seq"]
        self.init(
            id: row["id"], conversation: row["conversation"], outgoing: row["outgoing"],
            sender: try InboxID(validating: senderText), senderName: row["sender_name"],
            sentAt: Date(timeIntervalSince1970: Double(row["sent_at_ms"] as Int64) / 1000),
            receivedAt: Date(timeIntervalSince1970: Double(row["received_at_ms"] as Int64) / 1000),
            topic: row["topic"], seq: seq.map { UInt64($0) }, contentType: row["content_type"],
            encodedContent: row["content"], displayText: row["display_text"], isKnownType: row["known_type"])
    }
}

extension Data {
    public var hexString: String { map { String(format: "%02x", $0) }.joined() }
}
