import NIOCore
import NIOWebSocket
import Synchronization

/// The frames other threads write to the sockets of one event loop, in
/// the order they were handed over, written by one task on the loop.
///
/// A commit on the writers' commit thread answers every publisher and
/// feeds every live subscriber of its batch, most of them on the loops:
/// one task per frame cost each frame a closure, a lock and a queue entry
/// on its loop, and a `writev` of its own. Through the outbox a commit's
/// frames for one loop cost one task, and frames for one socket go out in
/// one `writev`. Order is kept: a frame handed over at time t is written
/// by a drain the loop queued no later than t, in the order the frames
/// were handed over, which is the order one task per frame gave.
final class LoopOutbox: Sendable {
    /// A frame waiting for its socket.
    struct Delivery {
        let writer: any OutboxWriter
        let frame: ByteBuffer
        /// A live envelope, written only if the socket is still open when
        /// the drain runs (the socket's close frame may have been queued
        /// since); everything else was accepted before the close and goes
        /// out ahead of the close frame.
        let isLive: Bool
    }

    let loop: any EventLoop
    private let waiting = Mutex<[Delivery]>([])
    /// The drain's own arrays, kept between drains with their capacity: a
    /// drain swaps its empty one for what waits, so neither the senders'
    /// array nor the drain's is allocated again per drain.
    private let drained: NIOLoopBoundBox<[Delivery]>
    private let toFlush: NIOLoopBoundBox<[any OutboxWriter]>

    private init(loop: any EventLoop) {
        self.loop = loop
        drained = NIOLoopBoundBox.makeBoxSendingValue([], eventLoop: loop)
        toFlush = NIOLoopBoundBox.makeBoxSendingValue([], eventLoop: loop)
    }

    /// One outbox per event loop, for as long as the process runs: a relay
    /// has a loop per core.
    private static let outboxes = Mutex<[ObjectIdentifier: LoopOutbox]>([:])

    static func of(_ loop: any EventLoop) -> LoopOutbox {
        outboxes.withLock { outboxes in
            if let outbox = outboxes[ObjectIdentifier(loop)] { return outbox }
            let outbox = LoopOutbox(loop: loop)
            outboxes[ObjectIdentifier(loop)] = outbox
            return outbox
        }
    }

    /// Hands a frame over; the first frame of an empty outbox queues the
    /// drain.
    func send(_ frame: ByteBuffer, by writer: any OutboxWriter, isLive: Bool) {
        let startDrain = waiting.withLock { waiting in
            waiting.append(Delivery(writer: writer, frame: frame, isLive: isLive))
            return waiting.count == 1
        }
        if startDrain { loop.execute { self.drain() } }
    }

    /// On the loop: writes what waits, then flushes each socket once.
    private func drain() {
        var deliveries = drained.value
        drained.value = []
        waiting.withLock { swap(&$0, &deliveries) }
        var writers = toFlush.value
        toFlush.value = []
        for delivery in deliveries
        where delivery.writer.writeWithoutFlush(delivery.frame, isLive: delivery.isLive) {
            writers.append(delivery.writer)
        }
        deliveries.removeAll(keepingCapacity: true)
        drained.value = deliveries
        for writer in writers { writer.flushOutbox() }
        writers.removeAll(keepingCapacity: true)
        toFlush.value = writers
    }
}

/// A socket's side of the outbox, called on its loop.
protocol OutboxWriter: AnyObject, Sendable {
    /// Writes the frame without flushing. True only for the first frame
    /// written since the last ``flushOutbox()``, so the drain flushes each
    /// socket once however many frames it wrote; false also when nothing
    /// was written (a live frame to a closed socket).
    func writeWithoutFlush(_ frame: ByteBuffer, isLive: Bool) -> Bool
    /// Flushes what the outbox wrote.
    func flushOutbox()
}
