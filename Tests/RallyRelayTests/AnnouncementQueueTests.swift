import Synchronization
import Testing

@testable import RallyRelay

/// How a node takes other nodes' announcements (ADR 0021): in bursts, so
/// one store read serves everything that arrived meanwhile.
@Suite("Announcement queue", .timeLimit(.minutes(1)))
struct AnnouncementQueueTests {
    @Test("what arrives while a burst is handled comes next as one burst, in order; finishing hands on the rest")
    func bursts() async {
        let queue = AnnouncementQueue()
        let bursts = Mutex<[[String]]>([])
        // The first burst's handler holds until the test has added more.
        let (started, startedSignal) = AsyncStream.makeStream(of: Void.self)
        let (release, releaseSignal) = AsyncStream.makeStream(of: Void.self)
        let handler = Task {
            await queue.handleBursts { burst in
                let count = bursts.withLock { bursts in
                    bursts.append(burst)
                    return bursts.count
                }
                if count == 1 {
                    startedSignal.yield()
                    for await _ in release { break }
                }
            }
        }
        queue.add("a 1 t")
        for await _ in started { break }
        queue.add("a 2 t")
        queue.add("b 1 u")
        queue.add("a 3 t")
        queue.finish()
        releaseSignal.yield()
        await handler.value
        #expect(bursts.withLock { $0 } == [["a 1 t"], ["a 2 t", "b 1 u", "a 3 t"]])
    }

    @Test("an empty finished queue ends its handler without a burst")
    func finishEmpty() async {
        let queue = AnnouncementQueue()
        queue.finish()
        let calls = Mutex(0)
        await queue.handleBursts { _ in calls.withLock { $0 += 1 } }
        #expect(calls.withLock { $0 } == 0)
    }
}
