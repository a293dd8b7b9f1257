import Foundation
import RallyCrypto
import RallyWire
import Testing

@testable import RallyRelay

/// Holds the first append until released, so a test can line up publishes
/// behind a commit in progress.
actor GatedStore: RelayStore {
    private let inner: SQLiteRelayStore
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
