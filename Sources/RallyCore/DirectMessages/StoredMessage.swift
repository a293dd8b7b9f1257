public import Foundation
public import RallyCrypto

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

    /// Whether this outgoing message still waits in the home's outbox for
    /// the relay (it has no place in its topic yet).
    public var isQueued: Bool { outgoing && seq == nil }

    /// This message with its place in the topic.
    public func withSeq(_ seq: UInt64) -> StoredMessage { replacing(seq: seq) }

    /// This message shown under another name: a group message's sender is
    /// named by the group's signed member record, not by the name the
    /// sender put in the message.
    public func withSenderName(_ name: String) -> StoredMessage { replacing(senderName: name) }

    /// This message shown with another text (a member blocked for all).
    public func withDisplayText(_ text: String) -> StoredMessage { replacing(displayText: text) }

    private func replacing(
        senderName: String? = nil, seq: UInt64? = nil, displayText: String? = nil
    ) -> StoredMessage {
        StoredMessage(
            id: id, conversation: conversation, outgoing: outgoing, sender: sender,
            senderName: senderName ?? self.senderName, sentAt: sentAt, receivedAt: receivedAt, topic: topic,
            seq: seq ?? self.seq, contentType: contentType, encodedContent: encodedContent,
            displayText: displayText ?? self.displayText, isKnownType: isKnownType)
    }
}

extension Data {
    public var hexString: String { Hex.encode(self) }

    /// Lowercase or uppercase hex digits, two per byte; nil otherwise.
    public init?(hexString: String) {
        guard hexString.utf8.count.isMultiple(of: 2) else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(hexString.utf8.count / 2)
        var iterator = hexString.utf8.makeIterator()
        while let high = iterator.next(), let low = iterator.next() {
            guard let h = Self.nibble(high), let l = Self.nibble(low) else { return nil }
            bytes.append(h << 4 | l)
        }
        self.init(bytes)
    }

    private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
