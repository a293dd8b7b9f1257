public import Foundation
public import RallyCrypto
public import RallyWire

/// What a subscription yields: the backlog after the cursor, then
/// `.caughtUp`, then live envelopes.
public enum RelaySubscriptionEvent: Sendable, Equatable {
    case envelope(WireEnvelope)
    /// The backlog after the cursor has been delivered; live envelopes
    /// follow.
    case caughtUp(seq: UInt64)
}

/// How a client reaches a relay. The SDK's services only see this
/// protocol: ``WebSocketTransport`` is the real one, and the `RallyTesting`
/// module has an in-memory relay for unit tests without sockets.
public protocol RelayTransport: Sendable {
    /// The relay's base URL (links and invites name it).
    var relayURL: URL { get }

    /// Opens a link to the relay authenticated as `identity`.
    /// - Throws: ``RelayClientError/unreachable(url:reason:)`` when the relay
    ///   cannot be reached, or the relay's refusal.
    func connect(as identity: Identity) async throws(RelayClientError) -> any RelayLink
}

/// One authenticated session with a relay. It does not reconnect by
/// itself: the owner opens a new one and resubscribes from its cursors.
public protocol RelayLink: Sendable {
    /// Whether the link can still carry requests.
    var isOpen: Bool { get async }

    /// Publishes to a topic. Every topic but an inbox needs `access`. A
    /// control entry (a group commit) names the seq of the last control
    /// entry its author has read and may rotate the topic's access key.
    /// - Throws: `.conflict`, `.accessRevoked`, `.quotaExceeded`,
    ///   `.rateLimited`, `.refused`, or a transport failure.
    func publish(
        topic: TopicName, payload: Data, idempotencyKey: Data, shouldPush: Bool, expiresAt: Date?,
        access: TopicAccess?, control: Bool, expectedControlSeq: UInt64, rotateAccessKey: Data?
    ) async throws(RelayClientError) -> WirePublishAck

    /// Stores this identity's signed key bundle on the relay.
    func putKeyBundle(_ bundle: WireSignedKeyBundle) async throws(RelayClientError)

    /// An inbox's key bundle as the relay has it (unverified), or nil.
    func keyBundle(for inbox: InboxID) async throws(RelayClientError) -> WireSignedKeyBundle?

    /// Subscribes to a topic from a cursor. The stream ends with an error
    /// when the relay refuses or the link drops; a retired access key reads
    /// up to its last seq, then ends with `.accessRevoked`.
    func subscribe(
        topic: TopicName, after cursor: UInt64, access: TopicAccess?
    ) async -> AsyncThrowingStream<RelaySubscriptionEvent, any Error>

    /// Ends a subscription.
    func unsubscribe(topic: TopicName) async

    /// Asks the relay for a sign of life on this link: the ladder's first,
    /// cheapest rung when a link looks degraded.
    /// - Throws: a transport failure when the relay does not answer.
    func ping() async throws(RelayClientError)

    /// Closes the link; pending requests fail with `.disconnected`.
    func close() async
}

extension RelayLink {
    /// Publishes to an inbox (no access key, not a control entry).
    public func publish(
        topic: TopicName, payload: Data, idempotencyKey: Data, shouldPush: Bool = false
    ) async throws(RelayClientError) -> WirePublishAck {
        try await publish(
            topic: topic, payload: payload, idempotencyKey: idempotencyKey, shouldPush: shouldPush, expiresAt: nil,
            access: nil, control: false, expectedControlSeq: 0, rotateAccessKey: nil)
    }
}

/// The real transport: a WebSocket per link (``RelayConnection``).
public struct WebSocketTransport: RelayTransport {
    public let relayURL: URL

    public init(relayURL: URL) {
        self.relayURL = relayURL
    }

    public func connect(as identity: Identity) async throws(RelayClientError) -> any RelayLink {
        try await RelayConnection.connect(to: relayURL, identity: identity)
    }
}
