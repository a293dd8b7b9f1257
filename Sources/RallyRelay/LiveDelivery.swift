import NIOCore
import Synchronization

/// The live part of one subscription, shared by the hub and the
/// subscription's feed. Once the feed is caught up, the hub writes the next
/// envelope straight to the subscriber's socket from the commit that stored
/// it, without waking the feed's task (ADR 0029). It does so only when
/// that keeps the feed's promises:
/// - the envelope is the next seq after the last one sent;
/// - nothing waits in the feed's buffer;
/// - it retires no key (a rotation may end the subscription, which is the
///   feed's to decide);
/// - the socket can take a write now.
///
/// Anything else goes into the feed's buffer as before, and from then on
/// everything does, until the feed has taken all of it.
final class LiveDelivery: Sendable {
    /// Writes one encoded frame after every frame already written to the
    /// socket, or returns false when the socket cannot take it now.
    typealias Write = @Sendable (ByteBuffer) -> Bool

    private struct State {
        var isLive = false
        var lastSent: UInt64 = 0
        /// Items handed to the feed's buffer and not yet taken by the feed.
        var buffered = 0
    }

    private let state = Mutex(State())
    private let write: Write

    init(write: @escaping Write) {
        self.write = write
    }

    /// By the hub, for each live item of the topic: true when written; false
    /// when the caller must put it in the feed's buffer (counted here, so
    /// the count and the decision cannot part).
    func offer(_ item: TopicHub.Item) -> Bool {
        state.withLock { state in
            guard state.isLive, state.buffered == 0, item.retiredKey == nil, let frame = item.frame,
                item.envelope.seq == state.lastSent + 1, write(frame)
            else {
                state.buffered += 1
                return false
            }
            state.lastSent = item.envelope.seq
            return true
        }
    }

    /// By the feed, for each item it takes from its buffer: the last seq
    /// sent, the hub's direct writes included.
    func took() -> UInt64 {
        state.withLock { state in
            state.buffered = max(0, state.buffered - 1)
            return state.lastSent
        }
    }

    /// By the feed, once it has sent `seq` itself (before any later write
    /// of the hub's can see it).
    func sent(through seq: UInt64) {
        state.withLock { $0.lastSent = max($0.lastSent, seq) }
    }

    /// By the feed, once `Subscribed` is out: the hub may write from here.
    func goLive(after seq: UInt64) {
        state.withLock { state in
            state.lastSent = max(state.lastSent, seq)
            state.isLive = true
        }
    }

    /// By the feed, when it starts a new buffer (after an overflow while
    /// catching up): what the old one held is gone.
    func newBuffer() {
        state.withLock { $0.buffered = 0 }
    }

    /// By the feed, when it ends: the hub writes nothing more.
    func stop() {
        state.withLock { $0.isLive = false }
    }
}
