import Foundation
import RallyCrypto
import RallyTestSupport
import RallyWire
import Testing

@testable import RallyCore

@Suite("Direct messages through a real relay", .timeLimit(.minutes(10)))
struct DirectMessageTests {
    @Test("A direct message travels from Alice to Bob and back, verified and decrypted")
    func roundTrip() async throws {
        let relay = try await TestRelay.start()
        let homes = TemporaryDirectory("rally-homes")
        defer { homes.remove() }
        let alice = try await RallyClient.create(
            home: homes.path("alice"), relayURL: relay.url, displayName: "Alice", logger: TestLogger.quiet)
        let bob = try await RallyClient.create(
            home: homes.path("bob"), relayURL: relay.url, displayName: "Bob", logger: TestLogger.quiet)

        let sent = try await alice.sendText("hello bob 👋", to: bob.inboxID)
        let report = try await bob.syncInbox()
        #expect(report.rejected.isEmpty)
        #expect(report.received.count == 1)
        let received = try #require(report.received.first)
        #expect(received.displayText == "hello bob 👋")
        #expect(received.sender == alice.inboxID)
        #expect(received.senderName == "Alice")
        #expect(received.id == sent.id)
        #expect(received.conversation == alice.inboxID.rawValue)
        #expect(received.contentType == "xmtp.org/text:1.0")

        _ = try await bob.sendText("hi alice", to: alice.inboxID)
        let back = try await alice.syncInbox()
        #expect(back.received.map(\.displayText) == ["hi alice"])
        // Alice's own store has both directions of the conversation.
        let conversation = try alice.store.messages(conversation: bob.inboxID.rawValue)
        #expect(conversation.map(\.outgoing) == [true, false])

        await alice.disconnect()
        await bob.disconnect()
        await relay.stop()
    }

    @Test("A recipient offline while 100 messages are sent gets all of them, in order, once")
    func offlineCatchUp() async throws {
        let relay = try await TestRelay.start()
        let homes = TemporaryDirectory("rally-homes")
        defer { homes.remove() }
        let alice = try await RallyClient.create(
            home: homes.path("alice"), relayURL: relay.url, displayName: "Alice", logger: TestLogger.quiet)
        let bob = try await RallyClient.create(
            home: homes.path("bob"), relayURL: relay.url, displayName: "Bob", logger: TestLogger.quiet)
        await bob.disconnect()

        for index in 0..<100 {
            _ = try await alice.sendText("message \(index)", to: bob.inboxID)
        }

        // Bob "comes back": a new client on the same home, as after a restart.
        let bobAgain = try RallyClient.open(home: homes.path("bob"), relayURL: relay.url, logger: TestLogger.quiet)
        let report = try await bobAgain.syncInbox()
        #expect(report.received.map(\.displayText) == (0..<100).map { "message \($0)" })
        #expect(Set(report.received.map(\.id)).count == 100)
        #expect(try bobAgain.store.messageCount() == 100)

        let second = try await bobAgain.syncInbox()
        #expect(second.received.isEmpty)
        #expect(try bobAgain.store.messageCount() == 100)

        await alice.disconnect()
        await bobAgain.disconnect()
        await relay.stop()
    }

    @Test("A follower receives messages live as they are sent")
    func followLive() async throws {
        let relay = try await TestRelay.start()
        let homes = TemporaryDirectory("rally-homes")
        defer { homes.remove() }
        let alice = try await RallyClient.create(
            home: homes.path("alice"), relayURL: relay.url, displayName: "Alice", logger: TestLogger.quiet)
        let bob = try await RallyClient.create(
            home: homes.path("bob"), relayURL: relay.url, displayName: "Bob", logger: TestLogger.quiet)

        let (events, continuation) = AsyncStream<RallyClient.InboxEvent>.makeStream()
        let follower = Task {
            try await bob.followInbox(untilCaughtUp: false) { event in continuation.yield(event) }
        }
        var iterator = events.makeAsyncIterator()
        // Wait for the subscription to be live before sending.
        while let event = await iterator.next() {
            if case .caughtUp = event { break }
        }
        for text in ["one", "two", "three"] { _ = try await alice.sendText(text, to: bob.inboxID) }
        var texts: [String] = []
        while texts.count < 3, let event = await iterator.next() {
            if case .message(let message) = event { texts.append(message.displayText) }
        }
        #expect(texts == ["one", "two", "three"])
        follower.cancel()
        await bob.disconnect()
        await alice.disconnect()
        await relay.stop()
    }

    /// A content type only the sender knows, as a newer client would send.
    struct PollCodec: ContentCodec {
        var contentType: ContentTypeID { ContentTypeID(authority: "example.com", type: "poll", major: 2, minor: 0) }
        func encode(_ value: String) throws(ContentError) -> WireEncodedContent {
            var content = WireEncodedContent()
            content.type = contentType.wire
            content.content = Data(value.utf8)
            return content
        }
        func decode(_ content: WireEncodedContent) throws(ContentError) -> String {
            String(decoding: content.content, as: UTF8.self)
        }
        func fallback(for value: String) -> String? { "Poll: \(value) (update Rally to vote)" }
        func shouldPush(_ value: String) -> Bool { true }
        func summary(of value: String) -> String { value }
    }

    @Test("A message of an unknown content type is kept and shown by its fallback text")
    func unknownContentType() async throws {
        let relay = try await TestRelay.start()
        let homes = TemporaryDirectory("rally-homes")
        defer { homes.remove() }
        var newer = CodecRegistry.standard
        newer.register(PollCodec())
        let alice = try await RallyClient.create(
            home: homes.path("alice"), relayURL: relay.url, displayName: "Alice", codecs: newer,
            logger: TestLogger.quiet)
        let bob = try await RallyClient.create(
            home: homes.path("bob"), relayURL: relay.url, displayName: "Bob", logger: TestLogger.quiet)

        _ = try await alice.send("Lunch?", codec: PollCodec(), to: bob.inboxID)
        let received = try #require(try await bob.syncInbox().received.first)
        #expect(received.displayText == "Poll: Lunch? (update Rally to vote)")
        #expect(!received.isKnownType)
        #expect(received.contentType == "example.com/poll:2.0")
        // The whole content is kept, so a later version can still decode it.
        let kept = try WireEncodedContent(serializedBytes: received.encodedContent)
        #expect(try PollCodec().decode(kept) == "Lunch?")
        await alice.disconnect()
        await bob.disconnect()
        await relay.stop()
    }

    @Test("Long text is compressed on the wire and arrives intact")
    func compressedText() async throws {
        let relay = try await TestRelay.start()
        let homes = TemporaryDirectory("rally-homes")
        defer { homes.remove() }
        let alice = try await RallyClient.create(
            home: homes.path("alice"), relayURL: relay.url, displayName: "Alice", logger: TestLogger.quiet)
        let bob = try await RallyClient.create(
            home: homes.path("bob"), relayURL: relay.url, displayName: "Bob", logger: TestLogger.quiet)
        let long = String(repeating: "all work and no play makes a long message. ", count: 2000)
        let sent = try await alice.sendText(long, to: bob.inboxID)
        let wire = try WireEncodedContent(serializedBytes: sent.encodedContent)
        #expect(wire.hasCompression && wire.compression == .deflate)
        #expect(wire.content.count < long.utf8.count / 10)
        let received = try #require(try await bob.syncInbox().received.first)
        #expect(received.displayText == long)
        await alice.disconnect()
        await bob.disconnect()
        await relay.stop()
    }

    @Test("Sending to an inbox with no published key bundle says so")
    func unknownRecipient() async throws {
        let relay = try await TestRelay.start()
        let homes = TemporaryDirectory("rally-homes")
        defer { homes.remove() }
        let alice = try await RallyClient.create(
            home: homes.path("alice"), relayURL: relay.url, displayName: "Alice", logger: TestLogger.quiet)
        let stranger = Identity(displayName: "never published").inboxID
        await #expect(throws: RallyClientError.unknownRecipient(stranger)) {
            _ = try await alice.sendText("hello?", to: stranger)
        }
        await alice.disconnect()
        await relay.stop()
    }

    @Test("Opening a home without an identity tells the user how to create one")
    func noIdentity() async throws {
        let homes = TemporaryDirectory("rally-homes")
        defer { homes.remove() }
        #expect(throws: RallyClientError.noIdentity(home: homes.path("empty").path)) {
            _ = try RallyClient.open(home: homes.path("empty"), relayURL: URL(string: "http://127.0.0.1:1")!)
        }
    }
}
