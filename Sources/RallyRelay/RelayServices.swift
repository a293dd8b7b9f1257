import Foundation
import Logging
import RallyCrypto
import RallyWire

/// Everything a connection or an HTTP request needs, shared by all of them.
/// A class, not a struct: it is held across suspension points by every
/// connection's tasks, and a struct this size (three existential stores,
/// the limits, the logger) was copied into each of their async frames,
/// about a third of an idle connection's memory (ADR 0022).
final class RelayServices: Sendable {
    let store: any RelayStore
    let blobs: any BlobStore
    let escrows: any EscrowStore
    let writer: PublishWriter
    let hub: TopicHub
    let clock: any RelayClock
    let limits: RelayLimits
    let metrics: RelayMetrics
    let logger: Logger
    /// The origins authentication and proofs are bound to.
    let origins: OriginSet
    let ipRates: KeyedRateLimiter
    let identityRates: KeyedRateLimiter
    let connections: ConnectionTracker
    let nonces: NonceCache
    /// The open WebSocket sessions, to tell them the relay is stopping.
    let sessions = SessionRegistry()
    /// Call rooms and their participants' connections.
    let rooms: RoomHub
    let roomRates: KeyedRateLimiter
    /// Calls the push targets of inboxes that receive envelopes asking for
    /// a push (ADR 0020).
    let push: PushDispatcher

    init(
        store: any RelayStore, blobs: any BlobStore, escrows: any EscrowStore, pushTargets: any PushTargetStore,
        clock: any RelayClock, limits: RelayLimits, metrics: RelayMetrics, logger: Logger,
        origins: [String] = ["http://127.0.0.1:8080"], pushDeliverer: (any PushDeliverer)? = nil
    ) {
        self.blobs = blobs
        self.escrows = escrows
        let hub = TopicHub()
        self.origins = OriginSet(origins)
        ipRates = KeyedRateLimiter(ratePerSecond: limits.publishRatePerSecondPerIP, burst: limits.publishBurstPerIP)
        identityRates = KeyedRateLimiter(
            ratePerSecond: limits.publishRatePerSecondPerIdentity, burst: limits.publishBurstPerIdentity)
        connections = ConnectionTracker(maxTotal: limits.maxConnections, maxPerIP: limits.maxConnectionsPerIP)
        nonces = NonceCache(
            capacity: limits.maxRememberedNonces,
            lifetimeMilliseconds: Int64(HTTPAuthorization.window * 1000) + 1)
        rooms = RoomHub(limits: limits.rooms, clock: clock)
        roomRates = KeyedRateLimiter(
            ratePerSecond: limits.rooms.createRatePerSecondPerIP, burst: limits.rooms.createBurstPerIP)
        self.store = store
        self.hub = hub
        self.clock = clock
        self.limits = limits
        self.metrics = metrics
        self.logger = logger
        let push = PushDispatcher(
            targets: pushTargets, deliverer: pushDeliverer ?? WebhookDeliverer(timeout: limits.push.callTimeout),
            clock: clock, limits: limits.push,
            metrics: metrics, logger: logger)
        self.push = push
        self.writer = PublishWriter(
            store: store, hub: hub, clock: clock, metrics: metrics, maxBatch: limits.maxCommitBatch,
            maxQueueBytes: limits.maxWriteQueueBytes, logger: logger, push: push)
    }

    func validateTopic(_ raw: String) throws(RelayFailure) -> TopicName {
        do {
            return try TopicName(validating: raw)
        } catch {
            throw RelayFailure(.invalidTopic, error.description, topic: String(raw.prefix(WireLimits.maxTopicLength)))
        }
    }

    /// Validates a topic name; a capability topic's id must be 64 lowercase
    /// hex digits (it names its first access key).
    func validateTopic(_ raw: String, forCapability: Bool) throws(RelayFailure) -> TopicName {
        let topic = try validateTopic(raw)
        if topic.kind != .inbox {
            let isHex =
                topic.id.utf8.count == 64
                && topic.id.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
            guard isHex else {
                throw RelayFailure(
                    .invalidTopic,
                    "the id of a \(topic.rawValue.prefix { $0 != "/" }) topic is 64 lowercase hex digits",
                    topic: topic.rawValue)
            }
        }
        return topic
    }

    /// Publish rate limits shared across connections and transports: per IP
    /// address and, when authenticated, per identity.
    func checkPublishRate(ip: String, identity: InboxID?, topic: String) throws(RelayFailure) {
        try checkPublishRate(publishRateBuckets(ip: ip, identity: identity), topic: topic, now: clock.monotonic)
    }

    /// The buckets of an address and an identity, for a connection to keep.
    func publishRateBuckets(ip: String, identity: InboxID?) -> PublishRateBuckets {
        let now = clock.monotonic
        return PublishRateBuckets(
            address: ipRates.bucket(ip, now: now),
            identity: identity.map { identityRates.bucket($0.rawValue, now: now) })
    }

    func checkPublishRate(_ buckets: PublishRateBuckets, topic: String, now: Duration) throws(RelayFailure) {
        if case .limited(let retryAfter) = buckets.address.take(now: now) {
            throw RelayFailure(
                .rateLimited, "too many publishes from this address", topic: topic,
                retryAfterMilliseconds: retryAfter)
        }
        if case .limited(let retryAfter)? = buckets.identity?.take(now: now) {
            throw RelayFailure(
                .rateLimited, "too many publishes by this identity", topic: topic, retryAfterMilliseconds: retryAfter)
        }
    }

    /// How far `key` may read `topic`: nil for no bound (the current key, or
    /// the key that founds a topic not created yet), else its last seq.
    func readBound(topic: TopicName, key: Data) async throws(RelayFailure) -> UInt64? {
        let status: AccessKeyStatus
        do {
            status = try await store.accessKeyStatus(topic: topic.rawValue, key: key)
        } catch {
            logger.error("reading access keys failed", metadata: ["topic": "\(topic)", "error": "\(error)"])
            throw RelayFailure(.internal, "could not read the topic", topic: topic.rawValue)
        }
        switch status {
        case .current: return nil
        case .retired(let validThrough): return validThrough
        case .unknown:
            throw RelayFailure(.forbidden, "this access key is not one of the topic's", topic: topic.rawValue)
        case .deleted:
            throw .topicDeleted(topic.rawValue)
        case .unregistered:
            guard TopicAccess.topicID(firstAccessKey: key) == topic.id else {
                throw RelayFailure(.forbidden, "this access key does not found the topic's id", topic: topic.rawValue)
            }
            return nil
        }
    }

    /// Checks an HTTP signature's nonce against replays.
    func rememberNonce(_ verified: HTTPAuthorization.Verified, topic: String) throws(RelayFailure) {
        switch nonces.remember(verified.nonce, signedAt: verified.millis, now: clock.nowMilliseconds) {
        case .fresh: return
        case .replayed: throw RelayFailure(.authenticationFailed, "this signed request was already used", topic: topic)
        case .full:
            throw RelayFailure(
                .rateLimited, "too many signed requests; try again", topic: topic, retryAfterMilliseconds: 1000)
        }
    }

    /// The checks every publish passes before it reaches the writer, on any
    /// transport, to `topic`: the publish's own, which the caller validated
    /// already (its proof is checked against it). `accessKey` is the key of
    /// a proof the caller verified.
    func validatePublish(
        _ publish: WirePublish, to topic: TopicName, accessKey: Data?
    ) throws(RelayFailure) -> PublishRequest {
        guard publish.payload.count <= WireLimits.maxPayloadBytes else {
            throw RelayFailure(
                .payloadTooLarge,
                "payload of \(publish.payload.count) bytes exceeds the limit of \(WireLimits.maxPayloadBytes)",
                topic: topic.rawValue)
        }
        guard publish.idempotencyKey.count <= WireLimits.maxIdempotencyKeyBytes else {
            throw RelayFailure(
                .invalidRequest,
                "idempotency key longer than \(WireLimits.maxIdempotencyKeyBytes) bytes", topic: topic.rawValue)
        }
        guard publish.expiresAtMs >= 0 else {
            throw RelayFailure(.invalidRequest, "expires_at_ms must not be negative", topic: topic.rawValue)
        }
        if !publish.rotateAccessKey.isEmpty {
            guard publish.control else {
                throw RelayFailure(
                    .invalidRequest, "rotate_access_key is only allowed on a control publish", topic: topic.rawValue)
            }
            guard publish.rotateAccessKey.count == 32 else {
                throw RelayFailure(.invalidRequest, "rotate_access_key is 32 bytes", topic: topic.rawValue)
            }
        }
        if topic.kind == .inbox {
            guard !publish.control else {
                throw RelayFailure(.invalidRequest, "inboxes have no control entries", topic: topic.rawValue)
            }
            return PublishRequest(publish, accessKey: nil, quotaBytes: limits.maxInboxBytes)
        }
        guard let accessKey else {
            throw RelayFailure(.forbidden, "publishing to this topic needs a topic proof", topic: topic.rawValue)
        }
        return PublishRequest(publish, accessKey: accessKey, quotaBytes: limits.maxTopicBytes)
    }

    /// Verifies a bundle's self-signature and stores it under the inbox id
    /// derived from its key. Returns the bundle now stored.
    func putKeyBundle(_ signed: WireSignedKeyBundle) async throws(RelayFailure) -> WireSignedKeyBundle {
        let identity: PublicIdentity
        do {
            identity = try PublicIdentity(verifying: signed)
        } catch {
            switch error {
            case .invalidSignature: throw RelayFailure(.invalidSignature, error.description)
            case .tooLarge: throw RelayFailure(.payloadTooLarge, error.description)
            default: throw RelayFailure(.invalidRequest, error.description)
            }
        }
        let createdAt = identity.wireBundle.createdAtMs
        do {
            let result = try await store.putKeyBundle(
                signed, inboxID: identity.inboxID, signingPublicKey: identity.signingKeyBytes,
                createdAtMilliseconds: createdAt)
            switch result {
            case .stored: return signed
            case .stale:
                throw RelayFailure(.invalidRequest, "a newer key bundle is already stored for this inbox")
            }
        } catch let failure as RelayFailure {
            throw failure
        } catch RelayStoreError.signingKeyMismatch {
            throw RelayFailure(.invalidRequest, "the stored bundle of this inbox has another signing key")
        } catch {
            logger.error("storing key bundle failed", metadata: ["error": "\(error)"])
            throw RelayFailure(.internal, "could not store the key bundle")
        }
    }

    func keyBundle(inboxID text: String) async throws(RelayFailure) -> WireSignedKeyBundle {
        let inboxID: InboxID
        do {
            inboxID = try InboxID(validating: text)
        } catch {
            throw RelayFailure(.invalidRequest, error.description)
        }
        let bundle: WireSignedKeyBundle?
        do {
            bundle = try await store.keyBundle(inboxID: inboxID)
        } catch {
            logger.error("reading key bundle failed", metadata: ["error": "\(error)"])
            throw RelayFailure(.internal, "could not read the key bundle")
        }
        guard let bundle else { throw RelayFailure(.notFound, "no key bundle for inbox \(inboxID)") }
        return bundle
    }

    func errorFrame(_ failure: RelayFailure, requestID: UInt64) -> WireServerFrame {
        metrics.recordError(failure.code)
        var frame = WireServerFrame()
        frame.requestID = requestID
        frame.error = failure.wire
        return frame
    }
}

/// The open WebSocket sessions of a relay.
actor SessionRegistry {
    private struct Entry {
        let session: RelaySession
        /// When the client must have authenticated by (cleared once
        /// checked).
        var authDeadline: ContinuousClock.Instant?
    }

    private var sessions: [ObjectIdentifier: Entry] = [:]
    /// Sessions a deadline check is running for, so a check that waits on
    /// a slow socket is not started twice.
    private var checking: Set<ObjectIdentifier> = []

    func add(_ session: RelaySession, authDeadline: ContinuousClock.Instant? = nil) {
        sessions[ObjectIdentifier(session)] = Entry(session: session, authDeadline: authDeadline)
    }

    func remove(_ session: RelaySession) {
        sessions[ObjectIdentifier(session)] = nil
        checking.remove(ObjectIdentifier(session))
    }

    /// Sends every open session the `SHUTTING_DOWN` notice, all at once,
    /// and returns when each was written (or its connection was gone).
    func announceShutdown() async {
        let open = sessions.values.map(\.session)
        await withTaskGroup(of: Void.self) { group in
            for session in open { group.addTask { await session.shuttingDown() } }
        }
    }

    /// The sessions a deadline has passed for: not authenticated by their
    /// authentication deadline (`now`, real time), or quiet for the idle
    /// timeout (`relayNow`, the relay's clock). Each is reported once until
    /// ``checked(_:)``; O(sessions), with no hop into any of them.
    func due(now: ContinuousClock.Instant, relayNow: Duration) -> [(RelaySession, SessionDeadline)] {
        var due: [(RelaySession, SessionDeadline)] = []
        var authChecked: [ObjectIdentifier] = []
        for (id, entry) in sessions where !checking.contains(id) {
            if let deadline = entry.authDeadline, now >= deadline {
                authChecked.append(id)
                if !entry.session.isAuthenticated.load(ordering: .relaxed) {
                    due.append((entry.session, .authentication))
                    continue
                }
            }
            if entry.session.isIdle(at: relayNow) { due.append((entry.session, .idle)) }
        }
        for id in authChecked { sessions[id]?.authDeadline = nil }
        for (session, _) in due { checking.insert(ObjectIdentifier(session)) }
        return due
    }

    func checked(_ session: RelaySession) {
        checking.remove(ObjectIdentifier(session))
    }
}

/// Which deadline of a connection passed.
enum SessionDeadline: Sendable {
    case authentication
    case idle
}

/// The publish limits one connection takes from: its address's bucket and,
/// once it is authenticated, its identity's.
struct PublishRateBuckets: Sendable {
    let address: KeyedRateLimiter.Bucket
    let identity: KeyedRateLimiter.Bucket?
}
