import Foundation
import RallyCrypto
import RallyWire
import Testing

@testable import RallyCore

@Suite("InboxProcessor")
struct InboxProcessorTests {
    let alice = Identity(displayName: "Alice", createdAt: Fixtures.created)
    let bob = Identity(displayName: "Bob", createdAt: Fixtures.created)
    let receivedAt = Fixtures.date(ms: 1_700_000_009_999)
    var bobsTopic: String { "inbox/\(bob.inboxID)" }

    func sealed(_ body: WireMessageBody, signedBy signer: Identity, to recipient: Identity) throws -> Data {
        try MessageSealing.seal(MessageSealing.sign(body, by: signer), to: recipient.publicIdentity)
    }

    @Test func aSealedTextMessageBecomesAStoredMessage() throws {
        let messageID = Data((0..<16).map { UInt8($0) })
        let content = try TextCodec().encode("hello Bob 👋")
        let body = Fixtures.body(
            from: alice, to: bob, content: content, messageID: messageID, sentAtMs: 1_700_000_000_250)
        let envelope = Fixtures.envelope(try sealed(body, signedBy: alice, to: bob), topic: bobsTopic, seq: 42)

        let result = InboxProcessor(identity: bob).process(envelope, receivedAt: receivedAt)
        let message = try result.get()
        #expect(message.id == "000102030405060708090a0b0c0d0e0f")
        #expect(message.sender == alice.inboxID)
        #expect(message.senderName == "Alice")
        #expect(message.conversation == alice.inboxID.rawValue)
        #expect(message.displayText == "hello Bob 👋")
        #expect(message.isKnownType)
        #expect(!message.outgoing)
        #expect(message.contentType == "xmtp.org/text:1.0")
        #expect(message.sentAt == Fixtures.date(ms: 1_700_000_000_250))
        #expect(message.receivedAt == receivedAt)
        #expect(message.topic == bobsTopic)
        #expect(message.seq == 42)
        let stored = try FrameCodec.decode(WireEncodedContent.self, from: message.encodedContent, limit: .max)
        #expect(stored == content)
    }

    @Test func anUnknownContentTypeIsKeptWithItsFallback() throws {
        var content = WireEncodedContent()
        content.type = ContentTypeID(authority: "example.com", type: "poll", major: 1, minor: 0).wire
        content.content = Data([1, 2, 3])
        content.fallback = "Poll: lunch?"
        let body = Fixtures.body(from: alice, to: bob, content: content)
        let envelope = Fixtures.envelope(try sealed(body, signedBy: alice, to: bob), topic: bobsTopic, seq: 1)
        let message = try InboxProcessor(identity: bob).process(envelope, receivedAt: receivedAt).get()
        #expect(!message.isKnownType)
        #expect(message.displayText == "Poll: lunch?")
        #expect(message.contentType == "example.com/poll:1.0")
        // Kept whole, so a later version can decode it.
        #expect(try FrameCodec.decode(WireEncodedContent.self, from: message.encodedContent, limit: .max) == content)
    }

    @Test func compressedTextIsDecodedAndStoredCompressed() throws {
        let text = String(repeating: "long message ", count: 500)
        let content = ContentCompression.compressedIfUseful(try TextCodec().encode(text))
        #expect(content.hasCompression)
        let body = Fixtures.body(from: alice, to: bob, content: content)
        let envelope = Fixtures.envelope(try sealed(body, signedBy: alice, to: bob), topic: bobsTopic, seq: 1)
        let message = try InboxProcessor(identity: bob).process(envelope, receivedAt: receivedAt).get()
        #expect(message.isKnownType)
        #expect(message.displayText == text)
        #expect(message.encodedContent.count < text.utf8.count)
    }

    func rejection(_ payload: Data, as recipient: Identity? = nil, seq: UInt64 = 7) -> InboxRejection? {
        let envelope = Fixtures.envelope(payload, topic: bobsTopic, seq: seq)
        switch InboxProcessor(identity: recipient ?? bob).process(envelope, receivedAt: receivedAt) {
        case .success(let message):
            Issue.record("expected a rejection, got \(message)")
            return nil
        case .failure(let rejection):
            return rejection
        }
    }

    @Test func aTamperedPayloadIsRejectedAsUndecryptable() throws {
        let content = try TextCodec().encode("hi")
        var payload = try sealed(Fixtures.body(from: alice, to: bob, content: content), signedBy: alice, to: bob)
        payload[payload.count - 3] ^= 0x20
        let rejected = rejection(payload)
        #expect(rejected?.topic == bobsTopic)
        #expect(rejected?.seq == 7)
        #expect(rejected?.reason == .decryptionFailed)
    }

    @Test func aMessageForSomeoneElseIsRejected() throws {
        let carol = Identity(displayName: "Carol")
        let content = try TextCodec().encode("hi")
        let payload = try sealed(Fixtures.body(from: alice, to: carol, content: content), signedBy: alice, to: carol)
        #expect(rejection(payload)?.reason == .decryptionFailed)
    }

    @Test func aForgedSenderIsRejected() throws {
        let carol = Identity(displayName: "Carol")
        var body = Fixtures.body(from: alice, to: bob, content: try TextCodec().encode("I am Carol"))
        body.sender = carol.publicIdentity.wireBundle
        let payload = try sealed(body, signedBy: alice, to: bob)
        #expect(rejection(payload)?.reason == .invalidSignature("message from \(carol.inboxID)"))
    }

    @Test func aMessageAddressedToAnotherInboxIsRejected() throws {
        let carol = Identity(displayName: "Carol")
        let body = Fixtures.body(from: alice, to: carol, content: try TextCodec().encode("hi"))
        let payload = try sealed(body, signedBy: alice, to: bob)
        #expect(rejection(payload)?.reason == .wrongRecipient)
    }

    @Test("garbage payloads are rejected as malformed", arguments: [Data(), Data([0xFF, 0x00]), Data("hello".utf8)])
    func garbage(_ payload: Data) {
        let rejected = rejection(payload, seq: 99)
        #expect(rejected?.topic == bobsTopic)
        #expect(rejected?.seq == 99)
        #expect(rejected?.reason == .malformed("sealed message"))
        #expect(rejected?.description == "dropped envelope #99 on \(bobsTopic): malformed sealed message")
    }

    @Test func aProcessedMessageIngestsIntoTheStore() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let store = try temp.openStore()
        let topic = try TopicName.inbox(bob.inboxID.rawValue)
        let body = Fixtures.body(from: alice, to: bob, content: try TextCodec().encode("stored"))
        let envelope = Fixtures.envelope(try sealed(body, signedBy: alice, to: bob), topic: topic.rawValue, seq: 3)
        let message = try InboxProcessor(identity: bob).process(envelope, receivedAt: receivedAt).get()
        #expect(try store.ingest(topic: topic, seq: envelope.seq, message: message, now: Fixtures.created))
        // The relay redelivering the same envelope stores nothing new.
        let again = try InboxProcessor(identity: bob).process(envelope, receivedAt: receivedAt).get()
        #expect(try store.ingest(topic: topic, seq: envelope.seq, message: again, now: Fixtures.created) == false)
        #expect(try store.messages(conversation: alice.inboxID.rawValue) == [message])
        #expect(try store.cursor(for: topic) == 3)
    }
}
