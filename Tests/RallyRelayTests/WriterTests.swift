import Foundation
import NIOCore
import NIOPosix
import RallyCrypto
import RallyWire
import Synchronization
import Testing

@testable import RallyRelay

/// A test store that changes how appends go and hands everything else to
/// the SQLite store inside it.
protocol ForwardingStore: RelayStore {
    var inner: SQLiteRelayStore { get }
}

extension ForwardingStore {
    func fetch(
        topic: String, after: UInt64, limit: Int, maxBytes: Int, nowMilliseconds: Int64
    ) async throws -> FetchResult {
        try await inner.fetch(
            topic: topic, after: after, limit: limit, maxBytes: maxBytes, nowMilliseconds: nowMilliseconds)
    }
    func accessKeyStatus(topic: String, key: Data) async throws -> AccessKeyStatus {
        try await inner.accessKeyStatus(topic: topic, key: key)
    }
    func deleteTopic(_ topic: String, accessKey: Data, nowMilliseconds: Int64) async throws -> TopicDeletion {
        try await inner.deleteTopic(topic, accessKey: accessKey, nowMilliseconds: nowMilliseconds)
    }
    func headSeq(topic: String) async throws -> UInt64 { try await inner.headSeq(topic: topic) }
    func putKeyBundle(
        _ bundle: WireSignedKeyBundle, inboxID: InboxID, signingPublicKey: Data, createdAtMilliseconds: Int64
    ) async throws -> KeyBundlePutResult {
        try await inner.putKeyBundle(
            bundle, inboxID: inboxID, signingPublicKey: signingPublicKey, createdAtMilliseconds: createdAtMilliseconds)
    }
    func keyBundle(inboxID: InboxID) async throws -> WireSignedKeyBundle? {
        try await inner.keyBundle(inboxID: inboxID)
    }
    func deleteExpired(nowMilliseconds: Int64, inboxCutoffMilliseconds: Int64) async throws -> Int {
        try await inner.deleteExpired(
            nowMilliseconds: nowMilliseconds, inboxCutoffMilliseconds: inboxCutoffMilliseconds)
    }
    func close() async throws { try await inner.close() }
}

/// Holds the first append until released, so a test can line up publishes
/// behind a commit in progress.
actor GatedStore: ForwardingStore {
    nonisolated let inner: SQLiteRelayStore
    private var gate: CheckedContinuation<Void, Never>?
    private var entered: CheckedContinuation<Void, Never>?
    private var isOpen = false
    private(set) var batchSizes: [Int] = []

    init(_ inner: SQLiteRelayStore) { self.inner = inner }

    func append(
        _ batch: [PublishRequest], serverTimeMilliseconds: Int64
    ) async throws -> [Result<AppendResult, AppendRefusal>] {
        batchSizes.append(batch.count)
        if !isOpen {
            entered?.resume()
            entered = nil
            await withCheckedContinuation { gate = $0 }
        }
        return try await inner.append(batch, serverTimeMilliseconds: serverTimeMilliseconds)
    }

    /// Returns once an append is held at the gate.
    func waitUntilHeld() async {
        if gate != nil { return }
        await withCheckedContinuation { entered = $0 }
    }

    func open() {
        isOpen = true
        gate?.resume()
        gate = nil
    }
}

/// The embedded store with a synchronous append that records which event
/// loop ran each commit, and holds the first one until the test lets it go
/// (explicit synchronization: the test waits for `entered`, then signals
/// `release`).
final class LoopRecordingStore: SynchronousAppending, ForwardingStore {
    let inner: SQLiteRelayStore
    private let loops: [any EventLoop]
    /// Whether the first append has been seen (and held).
    private let heldFirst = Mutex(false)
    let entered: AsyncStream<Void>
    private let enteredContinuation: AsyncStream<Void>.Continuation
    private let release = DispatchSemaphore(value: 0)
    /// Per commit: the index in `loops` of the loop it ran on (-1: none),
    /// whether it used the synchronous append, and its batch size.
    let commits = Mutex<[Commit]>([])

    struct Commit: Equatable {
        var loop: Int
        var synchronous: Bool
        var size: Int
    }

    init(_ inner: SQLiteRelayStore, loops: [any EventLoop]) {
        self.inner = inner
        self.loops = loops
        (entered, enteredContinuation) = AsyncStream.makeStream()
    }

    func appendNow(
        _ batch: [PublishRequest], serverTimeMilliseconds: Int64
    ) throws -> [Result<AppendResult, AppendRefusal>] {
        let loop = loops.firstIndex { $0.inEventLoop } ?? -1
        commits.withLock { $0.append(Commit(loop: loop, synchronous: true, size: batch.count)) }
        let isFirst = heldFirst.withLock { seen in
            defer { seen = true }
            return !seen
        }
        if isFirst {
            enteredContinuation.yield()
            release.wait()
        }
        return try inner.appendNow(batch, serverTimeMilliseconds: serverTimeMilliseconds)
    }

    func letGo() { release.signal() }

    func append(
        _ batch: [PublishRequest], serverTimeMilliseconds: Int64
    ) async throws -> [Result<AppendResult, AppendRefusal>] {
        let loop = loops.firstIndex { $0.inEventLoop } ?? -1
        commits.withLock { $0.append(Commit(loop: loop, synchronous: false, size: batch.count)) }
        return try await inner.append(batch, serverTimeMilliseconds: serverTimeMilliseconds)
    }
}

/// What a publish's completion saw: its seq and whether it ran on the
/// loop that submitted it.
private struct Answer: Sendable {
    let seq: UInt64
    let onItsLoop: Bool
}

@Suite("Group commit writer", .timeLimit(.minutes(1)))
struct WriterTests {
    @Test("concurrent publishes get gap-free seqs and share transactions")
    func groupCommit() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = GatedStore(try SQLiteRelayStore(url: directory.storeURL))
        let services = makeServices(store: store)

        // The first publish holds the writer inside its transaction...
        async let first = services.writer.publish(request(groupTopic, "first"))
        await store.waitUntilHeld()
        // ...while 99 more arrive from concurrent publishers.
        let seqs = try await withThrowingTaskGroup(of: UInt64.self) { group in
            for index in 0..<99 {
                group.addTask {
                    try await services.writer.publish(request(groupTopic, "p\(index)", key: "k\(index)")).get().envelope
                        .seq
                }
            }
            // All 99 are queued before the gate opens, so they share one commit.
            while services.writer.queuedCount < 99 { await Task.yield() }
            await store.open()
            var seqs: [UInt64] = []
            for try await seq in group { seqs.append(seq) }
            return seqs
        }
        let firstSeq = try await first.get().envelope.seq
        #expect(firstSeq == 1)
        #expect(seqs.sorted() == Array(2...100))
        #expect(await store.batchSizes == [1, 99])
        #expect(try await store.headSeq(topic: groupTopic) == 100)
        await services.writer.close()
        try await store.close()
    }

    @Test(
        "a queue longer than the largest batch is committed in batches of at most that size, in submission order, each publish answered with its own seq"
    )
    func batchesOfAtMostMaxCommitBatch() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = GatedStore(try SQLiteRelayStore(url: directory.storeURL))
        var limits = RelayLimits.default
        limits.maxCommitBatch = 3
        let services = makeServices(store: store, limits: limits)
        async let first = services.writer.publish(request(groupTopic, "first"))
        await store.waitUntilHeld()
        let answers = Mutex<[String: UInt64]>([:])
        let (done, finished) = AsyncStream.makeStream(of: Void.self)
        for index in 0..<7 {
            services.writer.submit(request(groupTopic, "p\(index)")) { result in
                answers.withLock { $0["p\(index)"] = (try? result.get().envelope.seq) ?? 0 }
                finished.yield()
            }
        }
        #expect(services.writer.queuedCount == 7)
        await store.open()
        var count = 0
        for await _ in done {
            count += 1
            if count == 7 { break }
        }
        #expect(try await first.get().envelope.seq == 1)
        #expect(answers.withLock { $0 } == Dictionary(uniqueKeysWithValues: (0..<7).map { ("p\($0)", UInt64($0 + 2)) }))
        #expect(await store.batchSizes == [1, 3, 3, 1])
        #expect(services.writer.queuedCount == 0 && services.writer.queuedBytes == 0)
        await services.writer.close()
        try await store.close()
    }

    @Test(
        "a publish to an idle writer is committed and answered on its own event loop; what queues behind that commit goes to the commit thread, in order, and so does the next publish until a commit carries one publish again"
    )
    func commitsOnTheLoops() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let (a, b) = (group.next(), group.next())
        #expect(a !== b)
        let store = LoopRecordingStore(try SQLiteRelayStore(url: directory.storeURL), loops: [a, b])
        let services = makeServices(store: store)
        let answers = Mutex<[String: Answer]>([:])
        let (done, finished) = AsyncStream.makeStream(of: Void.self)
        @Sendable func submit(_ name: String, on loop: any EventLoop) {
            services.writer.submit(request(groupTopic, name), on: loop) { result in
                let answer = Answer(seq: (try? result.get().envelope.seq) ?? 0, onItsLoop: loop.inEventLoop)
                answers.withLock { $0[name] = answer }
                finished.yield()
            }
        }
        a.execute { submit("first", on: a) }
        var entered = store.entered.makeAsyncIterator()
        _ = await entered.next()
        // Loop a is inside its commit; loop b queues two behind it, which
        // the commit thread commits so that loop a serves its sockets again.
        b.execute {
            submit("second", on: b)
            submit("third", on: b)
        }
        while services.writer.queuedCount < 2 { await Task.yield() }
        store.letGo()
        var count = 0
        for await _ in done {
            count += 1
            if count == 3 { break }
        }
        let seen = answers.withLock { $0 }
        #expect(seen.mapValues(\.seq) == ["first": 1, "second": 2, "third": 3])
        #expect(seen["first"]?.onItsLoop == true, "answered from the loop that committed it")
        #expect(seen["second"]?.onItsLoop == false && seen["third"]?.onItsLoop == false)
        let commits = store.commits.withLock { $0 }
        #expect(
            commits == [
                LoopRecordingStore.Commit(loop: 0, synchronous: true, size: 1),
                LoopRecordingStore.Commit(loop: -1, synchronous: true, size: 2),
            ], "loop a, then the commit thread (on neither loop), both with the synchronous append")
        // The last commit carried two publishes: while publishers keep more
        // than one in flight, a commit on a loop would hold that loop's
        // other sockets for its fsync, so the next goes to the commit
        // thread. After a commit of one, a loop commits again.
        // A publish is answered inside its commit: each is submitted once
        // the commit before it has ended, or it would join that commit
        // wherever it runs.
        for name in ["fourth", "fifth"] {
            await services.writer.untilIdle()
            a.execute { submit(name, on: a) }
            for await _ in done { break }
        }
        let later = answers.withLock { $0 }
        #expect(later["fourth"]?.seq == 4 && later["fourth"]?.onItsLoop == false)
        #expect(later["fifth"]?.seq == 5 && later["fifth"]?.onItsLoop == true)
        #expect(
            store.commits.withLock { Array($0.dropFirst(2)) } == [
                LoopRecordingStore.Commit(loop: -1, synchronous: true, size: 1),
                LoopRecordingStore.Commit(loop: 0, synchronous: true, size: 1),
            ])
        await services.writer.close()
        try await store.close()
        try await group.shutdownGracefully()
    }

    @Test("publishes from a loop to a store without a synchronous append are committed off the loop, in order")
    func asynchronousStoreCommitsOnATask() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let store = GatedStore(try SQLiteRelayStore(url: directory.storeURL))
        await store.open()
        let services = makeServices(store: store)
        let (answers, continuation) = AsyncStream.makeStream(of: Answer.self)
        loop.execute {
            for index in 1...3 {
                services.writer.submit(request(groupTopic, "p\(index)"), on: loop) { result in
                    continuation.yield(
                        Answer(seq: (try? result.get().envelope.seq) ?? 0, onItsLoop: loop.inEventLoop))
                }
            }
        }
        var seen: [Answer] = []
        for await answer in answers {
            seen.append(answer)
            if seen.count == 3 { break }
        }
        #expect(seen.map(\.seq) == [1, 2, 3])
        let noneOnTheLoop = seen.allSatisfy { !$0.onItsLoop }
        #expect(noneOnTheLoop)
        await services.writer.close()
        try await store.close()
        try await group.shutdownGracefully()
    }

    @Test("100 concurrent publishers on one topic: seqs 1...100, each stored once")
    func concurrentPublishers() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try SQLiteRelayStore(url: directory.storeURL)
        let services = makeServices(store: store)
        let seqs = try await withThrowingTaskGroup(of: UInt64.self) { group in
            for index in 0..<100 {
                group.addTask {
                    try await services.writer.publish(request(groupTopic, "p\(index)", key: "k\(index)")).get().envelope
                        .seq
                }
            }
            var seqs: [UInt64] = []
            for try await seq in group { seqs.append(seq) }
            return seqs
        }
        #expect(seqs.sorted() == Array(1...100))
        let stored = try await store.fetch(topic: groupTopic, after: 0, limit: 1000, nowMilliseconds: 0)
        #expect(stored.envelopes.map(\.seq) == Array(1...100))
        #expect(Set(stored.envelopes.map(\.payload)).count == 100)
        await services.writer.close()
        try await store.close()
    }

    @Test("after close, publishes are refused with SHUTTING_DOWN")
    func closed() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try SQLiteRelayStore(url: directory.storeURL)
        let services = makeServices(store: store)
        await services.writer.close()
        let result = await services.writer.publish(request(groupTopic, "late"))
        #expect(throws: RelayFailure.self) { try result.get() }
        #expect(try await store.headSeq(topic: groupTopic) == 0)
        try await store.close()
    }
}
