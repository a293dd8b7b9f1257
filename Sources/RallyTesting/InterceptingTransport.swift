public import Foundation
public import RallyCore
public import RallyCrypto
import RallyWire

/// Wraps any transport (the real WebSocket one included) and lets a test
/// act before each publish leaves: make another commit win a race, count
/// attempts. The SDK itself has no such hook.
public struct InterceptingTransport: RelayTransport {
    public let base: any RelayTransport
    public let beforePublish: @Sendable (InMemoryRelay.Publish) async -> Void

    public init(base: any RelayTransport, beforePublish: @escaping @Sendable (InMemoryRelay.Publish) async -> Void) {
        self.base = base
        self.beforePublish = beforePublish
    }

    public var relayURL: URL { base.relayURL }

    public func connect(as identity: Identity) async throws(RelayClientError) -> any RelayLink {
        InterceptingLink(base: try await base.connect(as: identity), identity: identity, beforePublish: beforePublish)
    }
}

struct InterceptingLink: RelayLink {
    let base: any RelayLink
    let identity: Identity
    let beforePublish: @Sendable (InMemoryRelay.Publish) async -> Void

    var isOpen: Bool { get async { await base.isOpen } }

    func publish(
        topic: TopicName, payload: Data, idempotencyKey: Data, shouldPush: Bool, expiresAt: Date?,
        access: TopicAccess?, control: Bool, expectedControlSeq: UInt64, rotateAccessKey: Data?
    ) async throws(RelayClientError) -> WirePublishAck {
        await beforePublish(
            InMemoryRelay.Publish(
                topic: topic, payload: payload, control: control, expectedControlSeq: expectedControlSeq,
                publisher: identity.inboxID))
        return try await base.publish(
            topic: topic, payload: payload, idempotencyKey: idempotencyKey, shouldPush: shouldPush,
            expiresAt: expiresAt, access: access, control: control, expectedControlSeq: expectedControlSeq,
            rotateAccessKey: rotateAccessKey)
    }

    func putKeyBundle(_ bundle: WireSignedKeyBundle) async throws(RelayClientError) {
        try await base.putKeyBundle(bundle)
    }

    func keyBundle(for inbox: InboxID) async throws(RelayClientError) -> WireSignedKeyBundle? {
        try await base.keyBundle(for: inbox)
    }

    func subscribe(
        topic: TopicName, after cursor: UInt64, access: TopicAccess?
    ) async -> AsyncThrowingStream<RelaySubscriptionEvent, any Error> {
        await base.subscribe(topic: topic, after: cursor, access: access)
    }

    func unsubscribe(topic: TopicName) async { await base.unsubscribe(topic: topic) }

    func ping() async throws(RelayClientError) { try await base.ping() }
    func close() async { await base.close() }
}
