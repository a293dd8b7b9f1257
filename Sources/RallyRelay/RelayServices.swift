import Foundation
import Logging
import RallyCrypto
import RallyWire

/// Everything a connection or an HTTP request needs, shared by all of them.
struct RelayServices: Sendable {
    let store: any RelayStore
    let writer: PublishWriter
    let hub: TopicHub
    let clock: any RelayClock
    let limits: RelayLimits
    let metrics: RelayMetrics
    let logger: Logger

    init(store: any RelayStore, clock: any RelayClock, limits: RelayLimits, metrics: RelayMetrics, logger: Logger) {
        let hub = TopicHub()
        self.store = store
        self.hub = hub
        self.clock = clock
        self.limits = limits
        self.metrics = metrics
        self.logger = logger
        self.writer = PublishWriter(
            store: store, hub: hub, clock: clock, metrics: metrics, maxBatch: limits.maxCommitBatch, logger: logger)
    }

    func validateTopic(_ raw: String) throws(RelayFailure) -> TopicName {
        do {
            return try TopicName(validating: raw)
        } catch {
            throw RelayFailure(.invalidTopic, error.description, topic: String(raw.prefix(WireLimits.maxTopicLength)))
        }
    }

    /// The checks every publish passes before it reaches the writer, on any
    /// transport.
    func validatePublish(_ publish: WirePublish) throws(RelayFailure) -> PublishRequest {
        let topic = try validateTopic(publish.topic)
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
        return PublishRequest(publish)
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
                signed, inboxID: identity.inboxID, signingPublicKey: identity.signingKey.rawRepresentation,
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
