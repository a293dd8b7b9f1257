import Foundation
import RallyCrypto
import RallyWire
import Testing

@testable import RallyRelay

/// Deleting a capability topic (a group's owner deleting the group,
/// docs/adr/0017): only the current access key may, everything of the topic
/// goes, and a tombstone answers from then on, so the id is never founded
/// again.
@Suite("Topic deletion", .timeLimit(.minutes(1)))
struct TopicDeletionTests {
    static let first = testAccess(31)
    static let second = testAccess(32)
    static let stranger = testAccess(33)
    static let topic = "group/" + first.foundedTopicID

    static func publish(
        _ payload: String, key: TopicAccess = first, control: Bool = false, expected: UInt64 = 0,
        rotate: TopicAccess? = nil
    ) -> PublishRequest {
        PublishRequest(
            topic: topic, payload: Data(payload.utf8), idempotencyKey: Data(), accessKey: key.publicKey,
            control: control, expectedControlSeq: expected, rotateAccessKey: rotate?.publicKey)
    }

    @Test("the store: only the current key deletes; envelopes and keys go; the tombstone refuses every later use")
    func store() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let store = try SQLiteRelayStore(url: directory.storeURL)
        #expect(
            try await store.deleteTopic(Self.topic, accessKey: Self.first.publicKey, nowMilliseconds: 1)
                == .refused(.unregistered))
        _ = try await store.appendAll([Self.publish("create", control: true)], serverTimeMilliseconds: 1)
        _ = try await store.appendAll([Self.publish("hello")], serverTimeMilliseconds: 2)
        _ = try await store.appendAll(
            [Self.publish("rotate", control: true, expected: 1, rotate: Self.second)], serverTimeMilliseconds: 3)
        // A retired key (a removed member) and a key the topic never had may not.
        #expect(
            try await store.deleteTopic(Self.topic, accessKey: Self.first.publicKey, nowMilliseconds: 4)
                == .refused(.retired(validThrough: 3)))
        #expect(
            try await store.deleteTopic(Self.topic, accessKey: Self.stranger.publicKey, nowMilliseconds: 4)
                == .refused(.unknown))
        #expect(try await store.headSeq(topic: Self.topic) == 3)

        #expect(
            try await store.deleteTopic(Self.topic, accessKey: Self.second.publicKey, nowMilliseconds: 5)
                == .deleted(envelopes: 3))
        #expect(try await store.fetch(topic: Self.topic, after: 0, limit: 10, nowMilliseconds: 5).envelopes.isEmpty)
        #expect(try await store.headSeq(topic: Self.topic) == 0)
        for key in [Self.first, Self.second, Self.stranger] {
            #expect(try await store.accessKeyStatus(topic: Self.topic, key: key.publicKey) == .deleted)
        }
        // Not written again, not even by the key that founds the id.
        #expect(
            try await store.append([Self.publish("again", control: true)], serverTimeMilliseconds: 6) == [
                .failure(.topicDeleted)
            ])
        #expect(
            try await store.deleteTopic(Self.topic, accessKey: Self.second.publicKey, nowMilliseconds: 7)
                == .alreadyDeleted)
        try await store.close()

        // The tombstone outlives a restart.
        let reopened = try SQLiteRelayStore(url: directory.storeURL)
        #expect(try await reopened.accessKeyStatus(topic: Self.topic, key: Self.first.publicKey) == .deleted)
        try await reopened.close()
    }

    @Test("over HTTP: DELETE needs the current key's proof; afterwards reads and writes get 410 TOPIC_DELETED")
    func http() async throws {
        let fixture = try await RelayFixture()
        let access = testAccess(34)
        let topic = "group/" + access.foundedTopicID
        var create = publishBody(topic, "create")
        create.control = true
        #expect(try await fixture.publish(create, access: access).body.ack?.seq == 1)
        let path = "/v1/topics/\(topic)"
        func proof(_ key: TopicAccess, _ method: String) -> [String: String] {
            [
                HTTPAuthorization.topicProofHeader: HTTPAuthorization.topicProofHeader(
                    access: key, binding: fixture.binding(method, path))
            ]
        }
        let unproven = try await fixture.raw("DELETE", path, headers: ["X": "y"])
        #expect(unproven.status == 403 && unproven.body.wireError?.code == .forbidden)
        let foreign = try await fixture.raw("DELETE", path, headers: proof(testAccess(35), "DELETE"))
        #expect(foreign.status == 403 && foreign.body.wireError?.code == .forbidden)
        #expect(try await fixture.raw("GET", path, headers: proof(access, "GET")).body.fetchResponse?.headSeq == 1)

        #expect(try await fixture.raw("DELETE", path, headers: proof(access, "DELETE")).status == 200)
        let read = try await fixture.raw("GET", path, headers: proof(access, "GET"))
        #expect(read.status == 410 && read.body.wireError?.code == .topicDeleted)
        let write = try await fixture.publish(publishBody(topic, "late"), access: access)
        #expect(write.status == 410 && write.body.wireError?.code == .topicDeleted)
        // A retry after a lost answer succeeds.
        #expect(try await fixture.raw("DELETE", path, headers: proof(access, "DELETE")).status == 200)
        // An inbox is not a capability topic: nobody deletes it this way.
        let inbox = try await fixture.raw("DELETE", "/v1/topics/inbox/\(Identity(displayName: "x").inboxID)")
        #expect(inbox.status == 403)
        await fixture.stop()
    }
}
