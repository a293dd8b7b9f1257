import Foundation
import RallyCore
import RallyTestSupport
import RallyWire
import Synchronization
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

    /// Pings by nonce: what the script does with each.
    enum Nonce: UInt64 {
        case answeredLater = 1, neverAnswered = 2, answeredNow = 3
    }

    static func ping(_ nonce: Nonce) -> WireClientFrame {
        var frame = WireClientFrame()
        frame.ping.nonce = nonce.rawValue
        return frame
    }

    static func pong(_ request: WireClientFrame) -> WireServerFrame {
        var frame = WireServerFrame()
        frame.requestID = request.requestID
        frame.pong.nonce = request.ping.nonce
        return frame
    }

    @Test(
        "each request keeps its own deadline on a shared connection: a short one times out while a longer one, sent first, is still answered"
    )
    func requestDeadlines() async throws {
        // The first ping is held by the script and answered only with the
        // third: it must outlive the second ping's timeout.
        let held = Mutex<WireClientFrame?>(nil)
        let (heldSignal, signalHeld) = AsyncStream.makeStream(of: Void.self)
        let relay = try await ScriptedRelay.start { request in
            switch Nonce(rawValue: request.ping.nonce) {
            case .answeredLater?:
                held.withLock { $0 = request }
                signalHeld.yield()
                return []
            case .neverAnswered?:
                return []
            case .answeredNow?:
                return [Self.pong(request)] + (held.withLock { $0 }.map { [Self.pong($0)] } ?? [])
            case nil:
                return []
            }
        }
        let link = try await RelayConnection.connect(to: relay.url, identity: nil)
        let later = Task { try await link.request(Self.ping(.answeredLater), timeout: .seconds(120)) }
        // Sent only once the script holds the first.
        for await _ in heldSignal { break }
        do {
            _ = try await link.request(Self.ping(.neverAnswered), timeout: .milliseconds(200))
            Issue.record("a ping the relay never answers returned")
        } catch {
            guard case .timedOut = error else {
                Issue.record("expected timedOut, got \(error)")
                return
            }
        }
        let now = try await link.request(Self.ping(.answeredNow))
        #expect(now.pong.nonce == Nonce.answeredNow.rawValue)
        let answered = try await later.value
        #expect(answered.pong.nonce == Nonce.answeredLater.rawValue)
        await link.close()
        await relay.stop()
    }
}
