import Foundation
import RallyCrypto
import RallyWire
import Testing

@testable import RallyRelay

/// Topic capabilities (docs/adr/0008): the key chain in the store, checked
/// in commit order; proofs on the session.
@Suite("Topic capabilities", .timeLimit(.minutes(1)))
struct CapabilityTests {
    static let first = testAccess(11)
    static let second = testAccess(12)
    static let third = testAccess(13)
    static let topic = "group/" + first.foundedTopicID

    static func publish(
        _ payload: String, key: TopicAccess = first, idempotency: String = "", control: Bool = false,
        expected: UInt64 = 0, rotate: TopicAccess? = nil
    ) -> PublishRequest {
        PublishRequest(
            topic: topic, payload: Data(payload.utf8), idempotencyKey: Data(idempotency.utf8),
            accessKey: key.publicKey, control: control, expectedControlSeq: expected,
            rotateAccessKey: rotate?.publicKey)
    }

    @Test("a topic is registered only by the key that founds its id", arguments: StoreKind.available)
    func registration(_ kind: StoreKind) async throws {
        let place = try await kind.make()
        let store = try await place.open()
        let squatted = try await store.append([Self.publish("squat", key: Self.second)], serverTimeMilliseconds: 1)
        #expect(squatted == [.failure(.forbidden("the topic does not exist and this key does not found its id"))])
        #expect(try await store.headSeq(topic: Self.topic) == 0)
        #expect(try await store.accessKeyStatus(topic: Self.topic, key: Self.first.publicKey) == .unregistered)
        let created = try await store.appendAll([Self.publish("hello")], serverTimeMilliseconds: 1)
        #expect(created.map(\.envelope.seq) == [1])
        #expect(try await store.accessKeyStatus(topic: Self.topic, key: Self.first.publicKey) == .current)
        #expect(try await store.accessKeyStatus(topic: Self.topic, key: Self.second.publicKey) == .unknown)
        let stranger = try await store.append([Self.publish("x", key: Self.second)], serverTimeMilliseconds: 1)
        #expect(stranger == [.failure(.forbidden("this access key is not the topic's current one"))])
        try await store.close()
        await place.remove()
    }

    @Test(
        "control publishes: compare-and-set on the last control seq, rotation in the same transaction",
        arguments: StoreKind.available)
    func controlAndRotation(_ kind: StoreKind) async throws {
        let place = try await kind.make()
        let store = try await place.open()
        _ = try await store.appendAll([Self.publish("create", control: true, expected: 0)], serverTimeMilliseconds: 1)
        _ = try await store.appendAll([Self.publish("message")], serverTimeMilliseconds: 1)
        // Two commits built on the same control entry in one batch: the
        // first in commit order wins, the second is told the new head.
        let race = try await store.append(
            [
                Self.publish("commit A", idempotency: "a", control: true, expected: 1),
                Self.publish("commit B", idempotency: "b", control: true, expected: 1),
            ], serverTimeMilliseconds: 2)
        #expect(try race[0].get().envelope.seq == 3)
        #expect(try race[0].get().envelope.control)
        #expect(race[1] == .failure(.conflict(lastControlSeq: 3)))
        // A rotation and a publish by the old key in one batch: the key
        // check runs in commit order too (and before the control check).
        let rotation = try await store.append(
            [
                Self.publish("rotate", idempotency: "r", control: true, expected: 3, rotate: Self.second),
                Self.publish("too late", idempotency: "l", control: true, expected: 3),
            ], serverTimeMilliseconds: 3)
        #expect(try rotation[0].get().envelope.seq == 4)
        #expect(try rotation[0].get().retiredKey == Self.first.publicKey)
        #expect(rotation[1] == .failure(.accessRevoked(lastReadableSeq: 4)))
        // The old key reads up to the rotation and can no longer write.
        #expect(
            try await store.accessKeyStatus(topic: Self.topic, key: Self.first.publicKey)
                == .retired(validThrough: 4))
        #expect(try await store.accessKeyStatus(topic: Self.topic, key: Self.second.publicKey) == .current)
        let stale = try await store.append([Self.publish("late")], serverTimeMilliseconds: 3)
        #expect(stale == [.failure(.accessRevoked(lastReadableSeq: 4))])
        // A retry of the rotating commit with the old key gets its ack back.
        let retry = try await store.appendAll(
            [Self.publish("rotate", idempotency: "r", control: true, expected: 3, rotate: Self.second)],
            serverTimeMilliseconds: 4)
        #expect(retry.map(\.envelope.seq) == [4])
        #expect(retry.map(\.duplicate) == [true])
        // ...but not with a key the topic never had.
        let foreign = try await store.append(
            [Self.publish("rotate", key: Self.third, idempotency: "r")], serverTimeMilliseconds: 4)
        #expect(foreign == [.failure(.forbidden("this access key is not one of the topic's"))])
        let next = try await store.appendAll(
            [Self.publish("next", key: Self.second, control: true, expected: 4)], serverTimeMilliseconds: 5)
        #expect(next.map(\.envelope.seq) == [5])
        let page = try await store.fetch(topic: Self.topic, after: 0, limit: 10, nowMilliseconds: 0)
        #expect(page.envelopes.map(\.control) == [true, false, true, true, true])
        #expect(page.retiredKeys == [4: Self.first.publicKey])
        try await store.close()
        await place.remove()
    }

    @Test(
        "one batch answers as if its publishes came one after another: heads advance, refusals store nothing, a retry of an earlier one is a duplicate, and a founding mid-batch counts for those after it",
        arguments: StoreKind.available)
    func batchAnsweredInOrder(_ kind: StoreKind) async throws {
        let place = try await kind.make()
        let store = try await place.open()
        _ = try await store.appendAll([Self.publish("create", control: true, expected: 0)], serverTimeMilliseconds: 1)
        var overQuota = Self.publish("too big", idempotency: "q")
        overQuota.quotaBytes = 10
        let mixed = try await store.append(
            [
                Self.publish("one", idempotency: "a"),
                Self.publish("stranger", key: Self.second, idempotency: "s"),
                Self.publish("commit", idempotency: "c", control: true, expected: 1),
                Self.publish("stale commit", idempotency: "d", control: true, expected: 1),
                Self.publish("one", idempotency: "a"),
                overQuota,
                Self.publish("two", idempotency: "b"),
                Self.publish("stranger's retry", key: Self.third, idempotency: "b"),
            ], serverTimeMilliseconds: 2)
        #expect(try mixed[0].get() == AppendResult(envelope: stored("one", seq: 2, time: 2), duplicate: false))
        #expect(mixed[1] == .failure(.forbidden("this access key is not the topic's current one")))
        #expect(try mixed[2].get().envelope.seq == 3)
        #expect(mixed[3] == .failure(.conflict(lastControlSeq: 3)))
        #expect(try mixed[4].get() == AppendResult(envelope: stored("one", seq: 2, time: 2), duplicate: true))
        #expect(mixed[5] == .failure(.quotaExceeded("the topic stores at most 10 bytes")))
        #expect(try mixed[6].get().envelope.seq == 4)
        #expect(mixed[7] == .failure(.forbidden("this access key is not one of the topic's")))
        #expect(try await store.headSeq(topic: Self.topic) == 4)
        // A batch that founds another topic between two publishes to it:
        // the one before the founding is refused, the one after stored.
        let other = "group/" + Self.second.foundedTopicID
        func toOther(_ payload: String, key: TopicAccess) -> PublishRequest {
            PublishRequest(topic: other, payload: Data(payload.utf8), accessKey: key.publicKey)
        }
        let founding = try await store.append(
            [
                toOther("early", key: Self.third), Self.publish("three"), toOther("found", key: Self.second),
                toOther("late stranger", key: Self.third), toOther("after", key: Self.second),
            ], serverTimeMilliseconds: 3)
        #expect(founding[0] == .failure(.forbidden("the topic does not exist and this key does not found its id")))
        #expect(try founding[1].get().envelope.seq == 5)
        #expect(try founding[2].get().envelope.seq == 1)
        #expect(founding[3] == .failure(.forbidden("this access key is not the topic's current one")))
        #expect(try founding[4].get().envelope.seq == 2)
        let page = try await store.fetch(topic: Self.topic, after: 0, limit: 10, nowMilliseconds: 0)
        #expect(
            page.envelopes.map { String(decoding: $0.payload, as: UTF8.self) } == [
                "create", "one", "commit", "two", "three",
            ])
        try await store.close()
        await place.remove()
    }

    private func stored(_ payload: String, seq: UInt64, time: Int64) -> WireEnvelope {
        var envelope = WireEnvelope()
        envelope.topic = Self.topic
        envelope.seq = seq
        envelope.serverTimeMs = time
        envelope.payload = Data(payload.utf8)
        return envelope
    }

    @Test("the group commit writer evaluates compare-and-set in commit order inside one batch")
    func writerBatchOrder() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = GatedStore(try SQLiteRelayStore(url: directory.storeURL))
        let services = makeServices(store: store)
        async let created = services.writer.publish(Self.publish("create", control: true, expected: 0))
        await store.waitUntilHeld()
        async let winner = services.writer.publish(Self.publish("A", idempotency: "a", control: true, expected: 1))
        while services.writer.queuedCount < 1 { await Task.yield() }
        async let loser = services.writer.publish(Self.publish("B", idempotency: "b", control: true, expected: 1))
        while services.writer.queuedCount < 2 { await Task.yield() }
        await store.open()
        #expect(try await created.get().envelope.seq == 1)
        #expect(try await winner.get().envelope.seq == 2)
        let refused = await loser
        #expect(refused.failure?.code == .conflict)
        #expect(refused.failure?.seq == 2)
        #expect(await store.batchSizes == [1, 2])
        await services.writer.close()
        try await store.close()
    }

    @Test("the session checks proofs: missing, for another origin or another connection, are FORBIDDEN")
    func sessionProofs() async throws {
        var harness = try SessionHarness()
        harness.autoProof = false
        var publish = publishBody(Self.topic, "x")
        #expect(await harness.call(1, .publish(publish))?.errorCode == .forbidden)
        publish.proof = .on(harness.session, topic: Self.topic, access: Self.first, origin: "https://evil.example")
        #expect(await harness.call(2, .publish(publish))?.errorCode == .forbidden)
        publish.proof = Self.first.connectionProof(
            origin: testOrigin, challengeNonce: Data(count: 32), topic: Self.topic)
        #expect(await harness.call(3, .publish(publish))?.errorCode == .forbidden)
        publish.proof = .on(harness.session, topic: groupTopic, access: Self.first)
        #expect(await harness.call(4, .publish(publish))?.errorCode == .forbidden)
        #expect(try await harness.store.headSeq(topic: Self.topic) == 0)
        publish.proof = .on(harness.session, topic: Self.topic, access: Self.first)
        #expect(await harness.call(5, .publish(publish))?.publishAck.seq == 1)
        // The connection now skips the checks for this topic and key only:
        // another key, or this key's proof on another topic, is checked.
        var otherKey = publishBody(Self.topic, "y")
        otherKey.proof = Self.second.connectionProof(
            origin: testOrigin, challengeNonce: Data(count: 32), topic: Self.topic)
        #expect(await harness.call(6, .publish(otherKey))?.errorCode == .forbidden)
        var otherTopic = publishBody(groupTopic, "z")
        otherTopic.proof = publish.proof
        #expect(await harness.call(7, .publish(otherTopic))?.errorCode == .forbidden)
        #expect(await harness.call(8, .publish(publish))?.publishAck.seq == 2)
        // Not 64 lowercase hex: not a capability topic id.
        #expect(await harness.call(9, .publish(publishBody("other/abc", "x")))?.errorCode == .invalidTopic)
        #expect(
            await harness.call(10, .publish(publishBody("group/" + String(repeating: "AB", count: 32), "x")))?
                .errorCode == .invalidTopic)
        await harness.finish()
    }

    @Test("over the session: retired keys get ACCESS_REVOKED with the last readable seq, CONFLICT carries the head")
    func sessionErrors() async throws {
        var harness = try SessionHarness()
        harness.autoProof = false
        let session = harness.session
        func proved(_ publish: WirePublish, _ access: TopicAccess) -> WireClientFrame.OneOf_Body {
            var publish = publish
            publish.proof = .on(session, topic: Self.topic, access: access)
            return .publish(publish)
        }
        var create = publishBody(Self.topic, "create")
        create.control = true
        #expect(await harness.call(1, proved(create, Self.first))?.publishAck.seq == 1)
        var rotate = publishBody(Self.topic, "rotate", key: "r")
        rotate.control = true
        rotate.expectedControlSeq = 1
        rotate.rotateAccessKey = Self.second.publicKey
        #expect(await harness.call(2, proved(rotate, Self.first))?.publishAck.seq == 2)
        let stale = await harness.call(3, proved(publishBody(Self.topic, "late"), Self.first))
        #expect(stale?.errorCode == .accessRevoked)
        #expect(stale?.error.seq == 2)
        var conflicting = publishBody(Self.topic, "c")
        conflicting.control = true
        conflicting.expectedControlSeq = 1
        let conflict = await harness.call(4, proved(conflicting, Self.second))
        #expect(conflict?.errorCode == .conflict)
        #expect(conflict?.error.seq == 2)
        // The lost ack of the rotation, retried with the old key.
        let retry = await harness.call(5, proved(rotate, Self.first))
        #expect(retry?.publishAck.seq == 2 && retry?.publishAck.duplicate == true)
        // rotate_access_key needs control.
        var bad = publishBody(Self.topic, "x")
        bad.rotateAccessKey = Self.third.publicKey
        #expect(await harness.call(6, proved(bad, Self.second))?.errorCode == .invalidRequest)
        await harness.finish()
    }

    @Test("a retired key's subscription delivers up to its last seq, then ends with ACCESS_REVOKED")
    func retiredSubscription() async throws {
        var harness = try SessionHarness()
        harness.autoProof = false
        let writer = harness.services.writer
        _ = try await writer.publish(Self.publish("1", control: true)).get()
        _ = try await writer.publish(Self.publish("2")).get()
        _ = try await writer.publish(Self.publish("3", control: true, expected: 1, rotate: Self.second)).get()
        _ = try await writer.publish(Self.publish("4", key: Self.second)).get()
        await harness.authenticate(Identity(displayName: "Removed"))
        var subscribe = WireSubscribe()
        subscribe.topic = Self.topic
        subscribe.proof = .on(harness.session, topic: Self.topic, access: Self.first)
        _ = await harness.session.handle(.make(1, .subscribe(subscribe)))
        var seqs: [UInt64] = []
        for _ in 0..<3 { seqs.append(try #require(await harness.reader.envelope()).seq) }
        #expect(seqs == [1, 2, 3])
        let revoked = try #require(await harness.reader.take { $0.errorCode != nil })
        #expect(revoked.errorCode == .accessRevoked)
        #expect(revoked.error.seq == 3)
        #expect(revoked.error.topic == Self.topic)
        while await harness.session.subscribedTopics.contains(Self.topic) { await Task.yield() }
        // A cursor already at the bound is refused at once, in reply.
        subscribe.afterSeq = 3
        let immediate = await harness.call(2, .subscribe(subscribe))
        #expect(immediate?.errorCode == .accessRevoked)
        // The current key reads everything; a stranger's key nothing.
        subscribe.afterSeq = 0
        subscribe.proof = .on(harness.session, topic: Self.topic, access: Self.third)
        #expect(await harness.call(3, .subscribe(subscribe))?.errorCode == .forbidden)
        await harness.finish()
    }

    @Test("a live subscription whose key is rotated ends after the rotating entry")
    func liveRotation() async throws {
        var harness = try SessionHarness()
        harness.autoProof = false
        let writer = harness.services.writer
        await harness.authenticate(Identity(displayName: "Member"))
        // Subscribing before the topic exists with the founding key is allowed.
        var subscribe = WireSubscribe()
        subscribe.topic = Self.topic
        subscribe.proof = .on(harness.session, topic: Self.topic, access: Self.first)
        #expect(await harness.call(1, .subscribe(subscribe))?.subscribed.caughtUpSeq == 0)
        _ = try await writer.publish(Self.publish("1", control: true)).get()
        _ = try await writer.publish(Self.publish("2", control: true, expected: 1, rotate: Self.second)).get()
        _ = try await writer.publish(Self.publish("3", key: Self.second)).get()
        #expect(try #require(await harness.reader.envelope()).seq == 1)
        let rotation = try #require(await harness.reader.envelope())
        #expect(rotation.seq == 2 && rotation.control)
        let revoked = try #require(await harness.reader.take { $0.errorCode != nil })
        #expect(revoked.errorCode == .accessRevoked && revoked.error.seq == 2 && revoked.requestID == 0)
        await harness.finish()
    }
}

extension Result {
    var failure: Failure? {
        if case .failure(let failure) = self { return failure }
        return nil
    }
}
