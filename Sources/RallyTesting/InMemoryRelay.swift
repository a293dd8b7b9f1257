public import Foundation
public import RallyCore
public import RallyCrypto
public import RallyWire

/// A relay in memory, for unit tests of client flows without sockets (the
/// way `HummingbirdTesting` and `NIOEmbedded` stand in for the network).
/// It keeps the relay's guarantees a client relies on: per-topic seqs,
/// idempotent publishes, linearized control entries (CONFLICT), access-key
/// chains (a retired key reads up to its last entry, then
/// ACCESS_REVOKED), a topic founded by its first key, inboxes only their
/// owner reads, backlog then `caughtUp` then live delivery.
///
/// It checks which access key a client presents, not the connection proof
/// the real relay checks (there is no challenge here); the proofs are
/// covered by the relay's own tests.
public actor InMemoryRelay {
    /// What a link is about to publish, as ``InMemoryRelay/beforePublish``
    /// and ``InterceptingTransport`` see it.
    public struct Publish: Sendable {
        public let topic: TopicName
        public let payload: Data
        public let control: Bool
        public let expectedControlSeq: UInt64
        public let publisher: InboxID
    }

    private struct Subscriber {
        let link: ObjectIdentifier
        let key: Data?
        let continuation: AsyncThrowingStream<RelaySubscriptionEvent, any Error>.Continuation
    }

    private struct Topic {
        var entries: [WireEnvelope] = []
        var idempotency: [Data: UInt64] = [:]
        var lastControlSeq: UInt64 = 0
        /// The access key chain: each key's public key and, once replaced,
        /// the last seq it may read.
        var keys: [(publicKey: Data, lastSeq: UInt64?)] = []
        var subscribers: [Subscriber] = []
    }

    private var topics: [String: Topic] = [:]
    private var bundles: [String: WireSignedKeyBundle] = [:]
    private var onPublish: (@Sendable (Publish) async -> Void)?
    private var failures: [RelayClientError] = []
    /// How many publishes the relay stored (not counting idempotent
    /// repeats).
    public private(set) var storedCount = 0

    public init() {}

    /// A transport whose links reach this relay.
    public nonisolated func transport(relayURL: URL = URL(string: "memory://relay")!) -> InMemoryTransport {
        InMemoryTransport(relay: self, relayURL: relayURL)
    }

    /// Runs `action` before each publish is stored (with the publish), so
    /// a test can let something else land first.
    public func beforePublish(_ action: (@Sendable (Publish) async -> Void)?) { onPublish = action }

    /// The next requests fail with these errors, one each, in order.
    public func failNext(_ errors: [RelayClientError]) { failures += errors }

    /// The entries of a topic.
    public func entries(of topic: TopicName) -> [WireEnvelope] { topics[topic.rawValue]?.entries ?? [] }

    // MARK: Requests

    private func injectedFailure() throws(RelayClientError) {
        if !failures.isEmpty { throw failures.removeFirst() }
    }

    func putKeyBundle(_ bundle: WireSignedKeyBundle, from inbox: InboxID) throws(RelayClientError) {
        try injectedFailure()
        guard let verified = try? PublicIdentity(verifying: bundle), verified.inboxID == inbox else {
            throw .refused(code: .invalidSignature, message: "the bundle is not the authenticated identity's")
        }
        bundles[inbox.rawValue] = bundle
    }

    func keyBundle(for inbox: InboxID) throws(RelayClientError) -> WireSignedKeyBundle? {
        try injectedFailure()
        return bundles[inbox.rawValue]
    }

    func publish(
        _ request: Publish, idempotencyKey: Data, shouldPush: Bool, access: TopicAccess?,
        rotateAccessKey: Data?
    ) async throws(RelayClientError) -> WirePublishAck {
        try injectedFailure()
        if let onPublish { await onPublish(request) }
        let name = request.topic.rawValue
        var topic = topics[name] ?? Topic()
        if let seq = topic.idempotency[idempotencyKey] { return ack(name, seq) }
        if request.topic.kind != .inbox {
            guard let access else { throw .refused(code: .forbidden, message: "no access key") }
            if topic.keys.isEmpty {
                guard access.foundedTopicID == request.topic.id else {
                    throw .refused(code: .forbidden, message: "the topic id does not name this key")
                }
                topic.keys = [(access.publicKey, nil)]
            }
            guard let index = topic.keys.firstIndex(where: { $0.publicKey == access.publicKey }) else {
                throw .refused(code: .forbidden, message: "unknown access key")
            }
            if let last = topic.keys[index].lastSeq { throw .accessRevoked(topic: name, lastReadableSeq: last) }
        }
        if request.control, request.expectedControlSeq != topic.lastControlSeq {
            throw .conflict(topic: name, lastControlSeq: topic.lastControlSeq)
        }
        let seq = UInt64(topic.entries.count + 1)
        var envelope = WireEnvelope()
        envelope.topic = name
        envelope.seq = seq
        envelope.payload = request.payload
        envelope.shouldPush = shouldPush
        envelope.control = request.control
        topic.entries.append(envelope)
        topic.idempotency[idempotencyKey] = seq
        if request.control { topic.lastControlSeq = seq }
        storedCount += 1
        if let rotateAccessKey, !topic.keys.isEmpty {
            topic.keys[topic.keys.count - 1].lastSeq = seq
            topic.keys.append((rotateAccessKey, nil))
        }
        // Deliver live; a subscriber whose key this entry retired reads it,
        // then its subscription ends.
        var staying: [Subscriber] = []
        for subscriber in topic.subscribers {
            subscriber.continuation.yield(.envelope(envelope))
            if let last = Self.lastSeq(of: subscriber.key, in: topic), last <= seq {
                subscriber.continuation.finish(
                    throwing: RelayClientError.accessRevoked(topic: name, lastReadableSeq: last))
            } else {
                staying.append(subscriber)
            }
        }
        topic.subscribers = staying
        topics[name] = topic
        return ack(name, seq)
    }

    private func ack(_ topic: String, _ seq: UInt64) -> WirePublishAck {
        var ack = WirePublishAck()
        ack.topic = topic
        ack.seq = seq
        return ack
    }

    private static func lastSeq(of key: Data?, in topic: Topic) -> UInt64? {
        guard let key else { return nil }
        return topic.keys.first { $0.publicKey == key }?.lastSeq ?? nil
    }

    func subscribe(
        _ topicName: TopicName, after cursor: UInt64, access: TopicAccess?, reader: InboxID, link: ObjectIdentifier,
        continuation: AsyncThrowingStream<RelaySubscriptionEvent, any Error>.Continuation
    ) {
        if let failure = failures.first {
            failures.removeFirst()
            continuation.finish(throwing: failure)
            return
        }
        let name = topicName.rawValue
        var topic = topics[name] ?? Topic()
        switch topicName.kind {
        case .inbox:
            guard topicName.id == reader.rawValue else {
                continuation.finish(throwing: RelayClientError.refused(code: .forbidden, message: "not your inbox"))
                return
            }
        default:
            guard let access, topic.keys.contains(where: { $0.publicKey == access.publicKey }) else {
                continuation.finish(throwing: RelayClientError.refused(code: .forbidden, message: "no access"))
                return
            }
        }
        let key = topicName.kind == .inbox ? nil : access?.publicKey
        let last = Self.lastSeq(of: key, in: topic)
        for envelope in topic.entries where envelope.seq > cursor && envelope.seq <= (last ?? .max) {
            continuation.yield(.envelope(envelope))
        }
        if let last {
            continuation.finish(throwing: RelayClientError.accessRevoked(topic: name, lastReadableSeq: last))
            return
        }
        continuation.yield(.caughtUp(seq: UInt64(topic.entries.count)))
        topic.subscribers.removeAll { $0.link == link }
        topic.subscribers.append(Subscriber(link: link, key: key, continuation: continuation))
        topics[name] = topic
    }

    func unsubscribe(_ topic: TopicName, link: ObjectIdentifier) {
        topics[topic.rawValue]?.subscribers.removeAll { subscriber in
            guard subscriber.link == link else { return false }
            subscriber.continuation.finish()
            return true
        }
    }

    func closed(link: ObjectIdentifier) {
        for name in topics.keys {
            topics[name]?.subscribers.removeAll { subscriber in
                guard subscriber.link == link else { return false }
                subscriber.continuation.finish(throwing: RelayClientError.disconnected("link closed"))
                return true
            }
        }
    }
}

/// A transport to an ``InMemoryRelay``.
public struct InMemoryTransport: RelayTransport {
    public let relay: InMemoryRelay
    public let relayURL: URL

    public func connect(as identity: Identity) async throws(RelayClientError) -> any RelayLink {
        InMemoryLink(relay: relay, identity: identity)
    }
}

/// One session with an ``InMemoryRelay``, authenticated as an identity.
public actor InMemoryLink: RelayLink {
    let relay: InMemoryRelay
    let identity: Identity
    private var open = true

    init(relay: InMemoryRelay, identity: Identity) {
        self.relay = relay
        self.identity = identity
    }

    public var isOpen: Bool { open }

    private func requireOpen() throws(RelayClientError) {
        guard open else { throw .disconnected("link closed") }
    }

    public func publish(
        topic: TopicName, payload: Data, idempotencyKey: Data, shouldPush: Bool, expiresAt: Date?,
        access: TopicAccess?, control: Bool, expectedControlSeq: UInt64, rotateAccessKey: Data?
    ) async throws(RelayClientError) -> WirePublishAck {
        try requireOpen()
        return try await relay.publish(
            InMemoryRelay.Publish(
                topic: topic, payload: payload, control: control, expectedControlSeq: expectedControlSeq,
                publisher: identity.inboxID),
            idempotencyKey: idempotencyKey, shouldPush: shouldPush, access: access, rotateAccessKey: rotateAccessKey)
    }

    public func putKeyBundle(_ bundle: WireSignedKeyBundle) async throws(RelayClientError) {
        try requireOpen()
        try await relay.putKeyBundle(bundle, from: identity.inboxID)
    }

    public func keyBundle(for inbox: InboxID) async throws(RelayClientError) -> WireSignedKeyBundle? {
        try requireOpen()
        return try await relay.keyBundle(for: inbox)
    }

    public func subscribe(
        topic: TopicName, after cursor: UInt64, access: TopicAccess?
    ) async -> AsyncThrowingStream<RelaySubscriptionEvent, any Error> {
        let (stream, continuation) = AsyncThrowingStream<RelaySubscriptionEvent, any Error>.makeStream()
        guard open else {
            continuation.finish(throwing: RelayClientError.disconnected("link closed"))
            return stream
        }
        await relay.subscribe(
            topic, after: cursor, access: access, reader: identity.inboxID, link: ObjectIdentifier(self),
            continuation: continuation)
        return stream
    }

    public func unsubscribe(topic: TopicName) async {
        await relay.unsubscribe(topic, link: ObjectIdentifier(self))
    }

    public func ping() async throws(RelayClientError) {
        try requireOpen()
    }

    public func close() async {
        guard open else { return }
        open = false
        await relay.closed(link: ObjectIdentifier(self))
    }
}
