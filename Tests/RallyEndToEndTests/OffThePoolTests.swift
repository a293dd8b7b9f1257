import Dispatch
import Foundation
import RallyTestSupport
import Testing

/// `offThePool`, which the CPU-heavy tests use so that they cannot stop
/// every other task of the test process.
@Suite("Test work moved off the concurrency pool", .timeLimit(.minutes(1)))
struct OffThePoolTests {
    @Test("more bodies blocked off the pool than it has threads leave it free for other tasks")
    func blockedBodiesLeaveThePoolFree() async throws {
        // More than the pool's threads (one per core): were the bodies on
        // the pool, some would never start and the rest would hold every
        // thread, and the suite's limit would end the test.
        let blockers = 2 * ProcessInfo.processInfo.activeProcessorCount + 2
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<blockers {
                group.addTask {
                    await offThePool {
                        entered.signal()
                        release.wait()
                    }
                }
            }
            // Were they on the pool, nothing of this test could run on it
            // again (its time limit included) until they are released: so
            // this thread releases them if they do not all start.
            let allStarted = try await onOwnThread {
                let started = (0..<blockers).allSatisfy { _ in entered.wait(timeout: .now() + 30) == .success }
                if !started { for _ in 0..<blockers { release.signal() } }
                return started
            }
            #expect(allStarted, "not every body started within 30 s")
            if allStarted {
                // Every body is blocked; a task on the pool still runs.
                let ran = await Task.detached { true }.value
                #expect(ran)
                for _ in 0..<blockers { release.signal() }
            }
            try await group.waitForAll()
        }
    }

    @Test("an issue recorded off the pool belongs to the test that recorded it")
    func issuesAreAttributed() async {
        // withKnownIssue fails the test unless the issue reaches it.
        await withKnownIssue {
            await offThePool { _ = Issue.record("recorded off the pool") }
        }
    }
}
