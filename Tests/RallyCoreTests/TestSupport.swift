import Foundation
import RallyCrypto
import RallyWire

@testable import RallyCore

/// A store home in a fresh temporary directory; `remove()` deletes it.
struct TemporaryHome {
    let root: URL
    /// The store's home, not yet created (the store creates it).
    var home: URL { root.appendingPathComponent("home") }

    init() {
        root = FileManager.default.temporaryDirectory.appendingPathComponent("rally-core-tests-\(UUID().uuidString)")
        try? FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
    }

    func openStore() throws -> LocalStore { try LocalStore(home: home) }

    func remove() { try? FileManager.default.removeItem(at: root) }
}

enum Fixtures {
    /// Dates on whole milliseconds survive the store's ms encoding exactly.
    static func date(ms: Int64) -> Date { Date(timeIntervalSince1970: Double(ms) / 1000) }

    static let created = date(ms: 1_700_000_000_123)

    static func message(
        id: String = MessageSealing.newMessageID().hexString, conversation: String = "peer", text: String = "hi",
        sender: InboxID = Identity(displayName: "x").inboxID, seq: UInt64? = 1, sentMs: Int64 = 1_700_000_000_001
    ) -> StoredMessage {
        StoredMessage(
            id: id, conversation: conversation, outgoing: false, sender: sender, senderName: "Sender",
            sentAt: date(ms: sentMs), receivedAt: date(ms: sentMs + 500), topic: "inbox/abc", seq: seq,
            contentType: TextCodec.contentType.description, encodedContent: Data(text.utf8), displayText: text,
            isKnownType: true)
    }

    /// A direct message body from `sender` to `recipient` carrying `content`.
    static func body(
        from sender: Identity, to recipient: Identity, content: WireEncodedContent,
        messageID: Data = MessageSealing.newMessageID(), sentAtMs: Int64 = 1_700_000_000_250
    ) -> WireMessageBody {
        var body = WireMessageBody()
        body.messageID = messageID
        body.sender = sender.publicIdentity.wireBundle
        body.recipient = recipient.inboxID.rawValue
        body.sentAtMs = sentAtMs
        body.content = content
        return body
    }

    static func envelope(_ payload: Data, topic: String, seq: UInt64) -> WireEnvelope {
        var envelope = WireEnvelope()
        envelope.topic = topic
        envelope.seq = seq
        envelope.serverTimeMs = 1_700_000_001_000
        envelope.payload = payload
        return envelope
    }
}
