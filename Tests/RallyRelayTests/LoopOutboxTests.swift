import Dispatch
import NIOCore
import NIOPosix
import Synchronization
import Testing

@testable import RallyRelay

/// A socket's side of the outbox that records what it is asked to write:
/// like the session's writer, it refuses live frames once closed.
private final class RecordingWriter: OutboxWriter {
    struct Record: Equatable {
        var written: [String] = []
        var flushes = 0
        var closed = false
        /// Whether every call came on the outbox's loop.
        var onLoop = true
        /// Written since the last flush: the outbox is told only of the
        /// first such frame.
        var awaitsFlush = false
    }

    let name: String
    let loop: any EventLoop
    let record = Mutex(Record())

    init(_ name: String, loop: any EventLoop) {
        self.name = name
        self.loop = loop
    }

    func writeWithoutFlush(_ frame: ByteBuffer, isLive: Bool) -> Bool {
        let onLoop = loop.inEventLoop
        return record.withLock { record in
            record.onLoop = record.onLoop && onLoop
            if isLive, record.closed { return false }
            record.written.append(String(buffer: frame))
            defer { record.awaitsFlush = true }
            return !record.awaitsFlush
        }
    }

    func flushOutbox() {
        let onLoop = loop.inEventLoop
        record.withLock {
            $0.onLoop = $0.onLoop && onLoop
            $0.awaitsFlush = false
            $0.flushes += 1
        }
    }

    var snapshot: Record { record.withLock { $0 } }
}

@Suite("Loop outbox", .timeLimit(.minutes(1)))
struct LoopOutboxTests {
    private static func frame(_ text: String) -> ByteBuffer { ByteBuffer(string: text) }

    /// Runs `body` while the loop is held by a task, so that everything it
    /// hands over waits for one drain; returns once that drain has run.
    private static func whileLoopIsBusy(_ loop: any EventLoop, _ body: () -> Void) async throws {
        let release = DispatchSemaphore(value: 0)
        let held = DispatchSemaphore(value: 0)
        loop.execute {
            held.signal()
            release.wait()
        }
        held.wait()
        body()
        release.signal()
        // Queued after the drain, so it runs after it.
        try await loop.submit {}.get()
    }

    /// `body` with a loop of its own and the loop's outbox; the loop is
    /// shut down after.
    private static func withOutbox(
        _ body: (any EventLoop, LoopOutbox) async throws -> Void
    ) async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        do {
            try await body(loop, LoopOutbox.of(loop))
        } catch {
            try await group.shutdownGracefully()
            throw error
        }
        try await group.shutdownGracefully()
    }

    @Test(
        "frames handed over from another thread while the loop is busy go out in one drain on the loop, in hand-over order per socket, each socket flushed once"
    )
    func oneDrainInOrder() async throws {
        try await Self.withOutbox { loop, outbox in
            #expect(LoopOutbox.of(loop) === outbox, "one outbox per loop")
            let a = RecordingWriter("a", loop: loop)
            let b = RecordingWriter("b", loop: loop)
            try await Self.whileLoopIsBusy(loop) {
                outbox.send(Self.frame("a1"), by: a, isLive: false)
                outbox.send(Self.frame("b1"), by: b, isLive: true)
                outbox.send(Self.frame("a2"), by: a, isLive: true)
                outbox.send(Self.frame("b2"), by: b, isLive: false)
                outbox.send(Self.frame("a3"), by: a, isLive: false)
            }
            #expect(a.snapshot == RecordingWriter.Record(written: ["a1", "a2", "a3"], flushes: 1))
            #expect(b.snapshot == RecordingWriter.Record(written: ["b1", "b2"], flushes: 1))
        }
    }

    @Test("a frame handed over after a drain ran goes out in the next drain, after the frames before it")
    func laterFramesInALaterDrain() async throws {
        try await Self.withOutbox { loop, outbox in
            let a = RecordingWriter("a", loop: loop)
            try await Self.whileLoopIsBusy(loop) { outbox.send(Self.frame("first"), by: a, isLive: false) }
            #expect(a.snapshot.written == ["first"])
            try await Self.whileLoopIsBusy(loop) { outbox.send(Self.frame("second"), by: a, isLive: true) }
            #expect(a.snapshot == RecordingWriter.Record(written: ["first", "second"], flushes: 2))
        }
    }

    @Test(
        "a socket closed before the drain refuses its live frames and still gets the frames it took before closing; a socket with nothing written is not flushed"
    )
    func liveFramesOfAClosedSocket() async throws {
        try await Self.withOutbox { loop, outbox in
            let closing = RecordingWriter("closing", loop: loop)
            let closed = RecordingWriter("closed", loop: loop)
            try await Self.whileLoopIsBusy(loop) {
                outbox.send(Self.frame("notice"), by: closing, isLive: false)
                outbox.send(Self.frame("envelope"), by: closing, isLive: true)
                outbox.send(Self.frame("envelope"), by: closed, isLive: true)
                closing.record.withLock { $0.closed = true }
                closed.record.withLock { $0.closed = true }
            }
            #expect(closing.snapshot == RecordingWriter.Record(written: ["notice"], flushes: 1, closed: true))
            #expect(closed.snapshot == RecordingWriter.Record(written: [], flushes: 0, closed: true))
        }
    }
}
