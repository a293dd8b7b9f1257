import Foundation
import NIOCore
import RallyWire
import Synchronization
import Testing

@testable import RallyRelay

/// The hub's direct path for a caught-up subscription (ADR 0029): what it
/// writes itself and what it leaves to the feed, so that nothing is sent
/// twice, out of order or past a rotation.
@Suite("Live delivery")
struct LiveDeliveryTests {
    /// A socket that records what it was given, and can refuse writes.
    private final class Socket: Sendable {
        let written = Mutex<[UInt64]>([])
        let writable = Mutex(true)

        func write(_ frame: ByteBuffer) -> Bool {
            guard writable.withLock({ $0 }) else { return false }
            let seq =
                (try? FrameCodec.decodeServerFrame(Data(frame.webSocketServerMessage.readableBytesView)))?.envelope.seq
                ?? 0
            written.withLock { $0.append(seq) }
            return true
        }
    }

    private static func item(_ seq: UInt64, retiredKey: Data? = nil) -> TopicHub.Item {
        var envelope = WireEnvelope()
        envelope.topic = "group/a"
        envelope.seq = seq
        return TopicHub.Item(envelope: envelope, retiredKey: retiredKey, frame: TopicHub.encodedFrame(envelope))
    }

    @Test("nothing is written before the feed goes live; after, the next seq is, and each one after it")
    func writesInOrderOnceLive() {
        let socket = Socket()
        let live = LiveDelivery(write: socket.write)
        #expect(!live.offer(Self.item(4)), "not live yet: into the buffer")
        #expect(live.took() == 0)
        live.sent(through: 4)
        live.goLive(after: 4)
        #expect(live.offer(Self.item(5)))
        #expect(live.offer(Self.item(6)))
        #expect(socket.written.withLock { $0 } == [5, 6])
        #expect(live.took() == 6, "the feed learns what the hub sent")
    }

    @Test("after one item goes into the buffer, every later one does until the feed has taken them all")
    func bufferedItemsHoldTheDirectPath() {
        let socket = Socket()
        let live = LiveDelivery(write: socket.write)
        live.goLive(after: 0)
        #expect(live.offer(Self.item(1)))
        // A gap (another node's earlier commit not here yet): the feed
        // reads it from the store.
        #expect(!live.offer(Self.item(3)))
        #expect(!live.offer(Self.item(2)), "the next seq, but something waits in the buffer")
        // The feed takes 3, reads 2 and 3 from the store and sends them.
        #expect(live.took() == 1)
        live.sent(through: 3)
        #expect(!live.offer(Self.item(4)), "2 still waits in the buffer")
        #expect(live.took() == 3, "2: already sent")
        #expect(live.took() == 3)
        live.sent(through: 4)
        #expect(live.offer(Self.item(5)), "the buffer is empty and 5 is next")
        #expect(socket.written.withLock { $0 } == [1, 5])
    }

    @Test(
        "a rotation, an item already sent, a socket that cannot take a write and a stopped feed all leave it to the buffer"
    )
    func whatGoesToTheFeed() {
        let socket = Socket()
        let live = LiveDelivery(write: socket.write)
        live.goLive(after: 7)
        #expect(!live.offer(Self.item(8, retiredKey: Data("old key".utf8))))
        #expect(live.took() == 7)
        live.sent(through: 8)
        #expect(!live.offer(Self.item(8)), "already sent")
        #expect(live.took() == 8)
        socket.writable.withLock { $0 = false }
        #expect(!live.offer(Self.item(9)))
        #expect(live.took() == 8)
        socket.writable.withLock { $0 = true }
        live.stop()
        #expect(!live.offer(Self.item(9)))
        #expect(socket.written.withLock { $0 }.isEmpty)
    }

    @Test("a new buffer after an overflow forgets what the old one held")
    func newBuffer() {
        let socket = Socket()
        let live = LiveDelivery(write: socket.write)
        #expect(!live.offer(Self.item(1)))
        #expect(!live.offer(Self.item(2)))
        live.newBuffer()
        live.sent(through: 2)
        live.goLive(after: 2)
        #expect(live.offer(Self.item(3)))
        #expect(socket.written.withLock { $0 } == [3])
    }
}
