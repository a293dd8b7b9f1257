import Foundation
import RallyCore
import RallyTestSupport
import RallyWire
import Testing

/// The order in which the WebSocket link hands a subscription's events to
/// its reader is the order their frames came off the socket, however the
/// link's own tasks are scheduled.
@Suite("WebSocket link: event order", .timeLimit(.minutes(3)))
struct WebSocketLinkOrderTests {
    static let topic = "test/ordered"

    /// `Subscribed` for `request`, then `count` live envelopes, all written
    /// back to back.
    static func subscribedThenLive(_ request: WireClientFrame, count: Int) -> [WireServerFrame] {
        guard case .subscribe(let subscribe)? = request.body else { return [] }
        var subscribed = WireServerFrame()
        subscribed.requestID = request.requestID
        subscribed.subscribed.topic = subscribe.topic
        subscribed.subscribed.caughtUpSeq = subscribe.afterSeq
        let live = (1...UInt64(count)).map { offset -> WireServerFrame in
            var frame = WireServerFrame()
            frame.envelope.topic = subscribe.topic
            frame.envelope.seq = subscribe.afterSeq + offset
            frame.envelope.payload = Data("live \(offset)".utf8)
            return frame
        }
        return [subscribed] + live
    }

    @Test("caughtUp comes before the live envelopes that followed Subscribed on the socket")
    func caughtUpBeforeLive() async throws {
        let count = 50
        let relay = try await ScriptedRelay.start { Self.subscribedThenLive($0, count: count) }
        let link = try await RelayConnection.connect(to: relay.url, identity: nil)
        var events = await link.subscribe(topic: try TopicName(validating: Self.topic), after: 10)
            .makeAsyncIterator()
        var seen: [RelaySubscriptionEvent] = []
        while seen.count < count + 1, let event = try await events.next() { seen.append(event) }
        #expect(seen.first == .caughtUp(seq: 10))
        let seqs = seen.compactMap { event -> UInt64? in
            if case .envelope(let envelope) = event { return envelope.seq }
            return nil
        }
        #expect(seqs == Array(11...UInt64(10 + count)))
        await link.close()
        await relay.stop()
    }
}
