import Foundation
import Logging
import RallyCrypto
import RallyTestSupport
import RallyWire
import Testing

@testable import RallyRelay

/// A relay store under test: how to open it (again, on the same data) and
/// how to remove its data afterwards.
struct StoreUnderTest: Sendable {
    let open: @Sendable () async throws -> any RelayStore
    let remove: @Sendable () async -> Void
}

/// The stores the conformance suite runs on: SQLite always, PostgreSQL
/// when the run has a server (scripts/test.sh starts one).
enum StoreKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite, postgres

    static var available: [StoreKind] { PostgresTestDatabase.isAvailable ? allCases : [.sqlite] }

    var testDescription: String { rawValue }

    func make() async throws -> StoreUnderTest {
        switch self {
        case .sqlite:
            let directory = try TemporaryDirectory()
            let url = directory.storeURL
            return StoreUnderTest(
                open: { try SQLiteRelayStore(url: url) }, remove: { directory.remove() })
        case .postgres:
            let database = try await PostgresTestDatabase.create()
            let location = database.location
            return StoreUnderTest(
                open: { try await PostgresRelayStore(location: location, logger: .quiet) },
                remove: { await database.drop() })
        }
    }
}

/// One conformance suite for every `RelayStore`: what the relay promises
/// (seqs per topic, idempotency, expiry, durability across a reopen, key
/// bundles, capability keys, deletion) holds whichever store keeps it.
@Suite("Relay store conformance", .timeLimit(.minutes(1)))
struct StoreTests {
    @Test("PostgreSQL is there wherever the suite must run on it (CI)")
    func postgresWhereRequired() {
        let ci = ProcessInfo.processInfo.environment["CI"].map { !$0.isEmpty && $0 != "false" } ?? false
        #expect(!ci || PostgresTestDatabase.isAvailable, "CI runs scripts/test.sh, which starts PostgreSQL")
    }

    @Test("seqs are per topic, strictly increasing and gap-free", arguments: StoreKind.available)
    func seqsPerTopic(_ kind: StoreKind) async throws {
        let place = try await kind.make()
        let store = try await place.open()
        let results = try await store.appendAll(
            [request("group/a", "1"), request("group/b", "1"), request("group/a", "2"), request("group/a", "3")],
            serverTimeMilliseconds: 42)
        #expect(results.map(\.envelope.seq) == [1, 1, 2, 3])
        #expect(results.allSatisfy { !$0.duplicate && $0.envelope.serverTimeMs == 42 })
        #expect(try await store.headSeq(topic: "group/a") == 3)
        #expect(try await store.headSeq(topic: "group/none") == 0)
        let page = try await store.fetch(topic: "group/a", after: 1, limit: 1, nowMilliseconds: 0)
        #expect(page.envelopes.map(\.seq) == [2])
        #expect(page.envelopes.first?.payload == Data("2".utf8))
        #expect(page.headSeq == 3)
        try await store.close()
        await place.remove()
    }

    @Test("a retried publish is stored once and answered with the original seq", arguments: StoreKind.available)
    func idempotentRetry(_ kind: StoreKind) async throws {
        let place = try await kind.make()
        let store = try await place.open()
        let first = try await store.appendAll([request("group/a", "hello", key: "k1")], serverTimeMilliseconds: 1)
        _ = try await store.appendAll([request("group/a", "other")], serverTimeMilliseconds: 2)
        let retry = try await store.appendAll(
            [
                request("group/a", "hello", key: "k1"), request("group/a", "same batch", key: "k2"),
                request("group/a", "same batch", key: "k2"),
            ],
            serverTimeMilliseconds: 3)
        #expect(first[0].envelope.seq == 1 && !first[0].duplicate)
        #expect(retry[0].duplicate && retry[0].envelope.seq == 1 && retry[0].envelope.serverTimeMs == 1)
        #expect(!retry[1].duplicate && retry[1].envelope.seq == 3)
        #expect(retry[2].duplicate && retry[2].envelope.seq == 3)
        // A retry is answered before the quota: the topic is over this
        // quota now, and the retry still gets its original ack.
        var overQuota = request("group/a", "hello", key: "k1")
        overQuota.quotaBytes = 1
        let retriedOverQuota = try await store.appendAll([overQuota], serverTimeMilliseconds: 4)
        #expect(retriedOverQuota[0].duplicate && retriedOverQuota[0].envelope.seq == 1)
        let all = try await store.fetch(topic: "group/a", after: 0, limit: 100, nowMilliseconds: 0)
        #expect(all.envelopes.map(\.seq) == [1, 2, 3])
        // The same key on another topic is another publish.
        let elsewhere = try await store.appendAll([request("group/b", "hello", key: "k1")], serverTimeMilliseconds: 4)
        #expect(!elsewhere[0].duplicate)
        try await store.close()
        await place.remove()
    }

    @Test("expired envelopes are pruned and their seqs are never reused", arguments: StoreKind.available)
    func pruning(_ kind: StoreKind) async throws {
        let place = try await kind.make()
        let store = try await place.open()
        _ = try await store.appendAll(
            [
                request("group/a", "short", expiresAt: 1_000), request("group/a", "forever"),
                request("group/a", "later", expiresAt: 5_000), request("group/a", "short too", expiresAt: 1_500),
            ],
            serverTimeMilliseconds: 500)
        // Expired but not yet pruned envelopes are not served.
        let before = try await store.fetch(topic: "group/a", after: 0, limit: 10, nowMilliseconds: 2_000)
        #expect(before.envelopes.map(\.seq) == [2, 3])
        #expect(try await store.deleteExpired(nowMilliseconds: 2_000) == 2)
        #expect(try await store.deleteExpired(nowMilliseconds: 2_000) == 0)
        let after = try await store.fetch(topic: "group/a", after: 0, limit: 10, nowMilliseconds: 0)
        #expect(after.envelopes.map(\.seq) == [2, 3])
        #expect(after.headSeq == 4)
        let next = try await store.appendAll([request("group/a", "next")], serverTimeMilliseconds: 2_000)
        #expect(next[0].envelope.seq == 5)
        try await store.close()
        await place.remove()
    }

    @Test(
        "a topic whose every envelope was pruned keeps its head across a reopen; the pruned bytes and idempotency keys are free again",
        arguments: StoreKind.available)
    func prunedTopicKeepsItsHead(_ kind: StoreKind) async throws {
        let place = try await kind.make()
        var quoted = request("group/a", "12345678", key: "k", expiresAt: 1_000)
        quoted.quotaBytes = 10
        do {
            let store = try await place.open()
            _ = try await store.appendAll(
                [quoted, request("group/a", "ab", expiresAt: 1_000), request("group/a", "cd", expiresAt: 1_000)],
                serverTimeMilliseconds: 500)
            var over = request("group/a", "xyz")
            over.quotaBytes = 10
            #expect(
                try await store.append([over], serverTimeMilliseconds: 600) == [
                    .failure(.quotaExceeded("the topic stores at most 10 bytes"))
                ])
            #expect(try await store.deleteExpired(nowMilliseconds: 2_000) == 3)
            try await store.close()
        }
        let store = try await place.open()
        #expect(try await store.headSeq(topic: "group/a") == 3)
        let page = try await store.fetch(topic: "group/a", after: 0, limit: 10, nowMilliseconds: 2_000)
        #expect(page.envelopes.isEmpty && page.headSeq == 3)
        // The same key is a new publish now that its original is gone, and
        // the quota counts only what is stored.
        quoted.expiresAtMilliseconds = 0
        let again = try await store.appendAll([quoted], serverTimeMilliseconds: 2_000)
        #expect(again.map(\.envelope.seq) == [4] && again.map(\.duplicate) == [false])
        try await store.close()
        await place.remove()
    }

    @Test(
        "PostgreSQL: a burst of announcements is read in one go: what is still stored and unexpired, once each, in seq order per topic, with the key a rotation retired",
        .enabled(if: PostgresTestDatabase.isAvailable, "needs RALLY_TEST_POSTGRES_URL"))
    func announcedEnvelopes() async throws {
        let place = try await StoreKind.postgres.make()
        let store = try #require(try await place.open() as? PostgresRelayStore)
        _ = try await store.appendAll(
            [
                request("group/a", "a1"), request("group/b", "b1"), request("group/a", "a2", expiresAt: 1_000),
                request("group/a", "a3"),
            ],
            serverTimeMilliseconds: 500)
        let first = testAccess(31)
        let topic = "group/" + first.foundedTopicID
        _ = try await store.appendAll(
            [
                PublishRequest(topic: topic, payload: Data("found".utf8), accessKey: first.publicKey, control: true),
                PublishRequest(
                    topic: topic, payload: Data("rotate".utf8), accessKey: first.publicKey, control: true,
                    expectedControlSeq: 1, rotateAccessKey: testAccess(32).publicKey),
            ],
            serverTimeMilliseconds: 500)
        let announced = [
            AnnouncedEnvelope(topic: "group/a", seq: 3), AnnouncedEnvelope(topic: "group/b", seq: 1),
            AnnouncedEnvelope(topic: "group/a", seq: 1), AnnouncedEnvelope(topic: "group/a", seq: 3),
            // Expired by the time it is read, and one never stored.
            AnnouncedEnvelope(topic: "group/a", seq: 2), AnnouncedEnvelope(topic: "group/b", seq: 9),
            AnnouncedEnvelope(topic: topic, seq: 2),
        ]
        let items = try await store.announcedEnvelopes(announced, nowMilliseconds: 2_000)
        // In seq order within each topic (the order of topics is the store's).
        let byTopic = Dictionary(grouping: items, by: \.envelope.topic)
        #expect(byTopic.mapValues { $0.map(\.envelope.seq) } == ["group/a": [1, 3], "group/b": [1], topic: [2]])
        #expect(byTopic["group/a"]?.map { String(decoding: $0.envelope.payload, as: UTF8.self) } == ["a1", "a3"])
        #expect(byTopic[topic]?.map(\.retiredKey) == [first.publicKey])
        #expect(items.filter { $0.envelope.topic != topic }.allSatisfy { $0.retiredKey == nil })
        try await store.close()
        await place.remove()
    }

    @Test("the store survives a reopen", arguments: StoreKind.available)
    func reopen(_ kind: StoreKind) async throws {
        let place = try await kind.make()
        let identity = Identity(displayName: "Ada")
        do {
            let store = try await place.open()
            _ = try await store.appendAll(
                [request("group/a", "1", key: "k"), request("group/a", "2")], serverTimeMilliseconds: 1)
            let bundle = identity.signedKeyBundle()
            _ = try await store.putKeyBundle(
                bundle, inboxID: identity.inboxID, signingPublicKey: identity.signingKey.publicKey.rawRepresentation,
                createdAtMilliseconds: 10)
            try await store.close()
        }
        let store = try await place.open()
        let page = try await store.fetch(topic: "group/a", after: 0, limit: 10, nowMilliseconds: 0)
        #expect(page.envelopes.map(\.payload) == [Data("1".utf8), Data("2".utf8)])
        let retry = try await store.appendAll(
            [request("group/a", "1", key: "k"), request("group/a", "3")], serverTimeMilliseconds: 2)
        #expect(retry.map(\.envelope.seq) == [1, 3])
        #expect(retry.map(\.duplicate) == [true, false])
        #expect(try await store.keyBundle(inboxID: identity.inboxID) == identity.signedKeyBundle())
        try await store.close()
        await place.remove()
    }

    @Test("a key bundle is replaced only by one of the same key that is not older", arguments: StoreKind.available)
    func keyBundles(_ kind: StoreKind) async throws {
        let place = try await kind.make()
        let store = try await place.open()
        let identity = Identity(displayName: "Ada")
        let key = identity.signingKey.publicKey.rawRepresentation
        var first = WireSignedKeyBundle()
        first.bundle = Data("first".utf8)
        var second = WireSignedKeyBundle()
        second.bundle = Data("second".utf8)
        var older = WireSignedKeyBundle()
        older.bundle = Data("older".utf8)

        #expect(try await store.keyBundle(inboxID: identity.inboxID) == nil)
        #expect(
            try await store.putKeyBundle(
                first, inboxID: identity.inboxID, signingPublicKey: key, createdAtMilliseconds: 10) == .stored)
        #expect(
            try await store.putKeyBundle(
                second, inboxID: identity.inboxID, signingPublicKey: key, createdAtMilliseconds: 10) == .stored)
        #expect(
            try await store.putKeyBundle(
                older, inboxID: identity.inboxID, signingPublicKey: key, createdAtMilliseconds: 9)
                == .stale(current: second))
        await #expect(throws: RelayStoreError.signingKeyMismatch) {
            try await store.putKeyBundle(
                first, inboxID: identity.inboxID, signingPublicKey: Data(count: 32), createdAtMilliseconds: 11)
        }
        #expect(try await store.keyBundle(inboxID: identity.inboxID) == second)
        try await store.close()
        await place.remove()
    }
}
