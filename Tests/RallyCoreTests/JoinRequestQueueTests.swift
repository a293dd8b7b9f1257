import RallyWire
import Testing

@testable import RallyCore

@Suite("Join request queue: what the reader adds, the answerer takes in batches")
struct JoinRequestQueueTests {
    static func envelope(_ seq: UInt64) -> WireEnvelope {
        var envelope = WireEnvelope()
        envelope.seq = seq
        return envelope
    }

    @Test func theAnswererTakesEveryRequestWaitingUpToABatchOldestFirst() async {
        let queue = JoinRequestQueue(batchLimit: 3, capacity: 10)
        for seq in 1...5 { await queue.add(Self.envelope(UInt64(seq))) }
        await queue.markCaughtUp()
        #expect(await queue.take().map(\.seq) == [1, 2, 3])
        #expect(await queue.take().map(\.seq) == [4, 5])
    }

    @Test func aRequestDeliveredAgainAfterTheSubscriptionRestartedIsQueuedOnce() async {
        let queue = JoinRequestQueue(batchLimit: 10, capacity: 10)
        await queue.markCaughtUp()
        for seq in [1, 2, 3] { await queue.add(Self.envelope(UInt64(seq))) }
        #expect(await queue.take().map(\.seq) == [1, 2, 3])
        // Not yet recorded, so the cursor still says 0: all three again.
        for seq in [1, 2, 3, 4] { await queue.add(Self.envelope(UInt64(seq))) }
        #expect(await queue.take().map(\.seq) == [4])
    }

    @Test func untilTheBacklogIsReadTheAnswererWaitsForAFullBatch() async {
        let queue = JoinRequestQueue(batchLimit: 3, capacity: 10)
        async let full = queue.take()
        for seq in 1...4 { await queue.add(Self.envelope(UInt64(seq))) }
        #expect(await full.map(\.seq) == [1, 2, 3])
        async let rest = queue.take()
        await queue.markCaughtUp()
        #expect(await rest.map(\.seq) == [4])
    }

    @Test func aWaitingAnswererGetsTheNextRequestAndFinishingDrainsThenEnds() async {
        let queue = JoinRequestQueue(batchLimit: 10, capacity: 10)
        await queue.markCaughtUp()
        async let taken = queue.take()
        await queue.add(Self.envelope(7))
        #expect(await taken.map(\.seq) == [7])
        await queue.add(Self.envelope(8))
        await queue.finish()
        #expect(await queue.take().map(\.seq) == [8])
        #expect(await queue.take().isEmpty)
        // Nothing is queued once finished.
        await queue.add(Self.envelope(9))
        #expect(await queue.take().isEmpty)
    }

    @Test func aFullQueueHoldsTheReaderUntilTheAnswererTakes() async throws {
        let queue = JoinRequestQueue(batchLimit: 2, capacity: 2)
        await queue.markCaughtUp()
        await queue.add(Self.envelope(1))
        let reader = Task { await queue.add(Self.envelope(2)) }
        while await queue.readersWaiting == 0 {
            try Task.checkCancellation()
            await Task.yield()
        }
        #expect(await queue.take().map(\.seq) == [1, 2])
        await reader.value
        #expect(await queue.readersWaiting == 0)
    }

    @Test func cancellingAWaitingAnswererEndsItsWait() async {
        let queue = JoinRequestQueue(batchLimit: 2, capacity: 2)
        let answerer = Task { await queue.take() }
        answerer.cancel()
        #expect(await answerer.value.isEmpty)
    }
}
