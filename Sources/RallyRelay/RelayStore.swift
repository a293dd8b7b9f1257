import Foundation
import RallyCrypto
import RallyWire

/// One publish as the writer hands it to the store. The topic has already
/// been validated and the sizes checked.
public struct PublishRequest: Sendable, Equatable {
    public var topic: String
    public var payload: Data
    /// Empty means "no idempotency": every such publish is stored.
    public var idempotencyKey: Data
    public var shouldPush: Bool
    /// 0 means the envelope does not expire.
    public var expiresAtMilliseconds: Int64

    public init(
        topic: String, payload: Data, idempotencyKey: Data = Data(), shouldPush: Bool = false,
        expiresAtMilliseconds: Int64 = 0
    ) {
        self.topic = topic
        self.payload = payload
        self.idempotencyKey = idempotencyKey
        self.shouldPush = shouldPush
        self.expiresAtMilliseconds = expiresAtMilliseconds
    }

    init(_ wire: WirePublish) {
        self.init(
            topic: wire.topic, payload: wire.payload, idempotencyKey: wire.idempotencyKey,
            shouldPush: wire.shouldPush, expiresAtMilliseconds: wire.expiresAtMs)
    }
}

/// What the store did with one publish of a batch.
public struct AppendResult: Sendable, Equatable {
    /// The stored envelope: the new one, or for a duplicate the one stored
    /// by the original publish.
    public var envelope: WireEnvelope
    /// True when an envelope with the same topic and idempotency key was
    /// already stored; nothing new was written.
    public var duplicate: Bool

    public init(envelope: WireEnvelope, duplicate: Bool) {
        self.envelope = envelope
        self.duplicate = duplicate
    }

    var ack: WirePublishAck {
        var ack = WirePublishAck()
        ack.topic = envelope.topic
        ack.seq = envelope.seq
        ack.serverTimeMs = envelope.serverTimeMs
        ack.duplicate = duplicate
        return ack
    }
}

public struct FetchResult: Sendable, Equatable {
    public var envelopes: [WireEnvelope]
    /// The topic's last assigned seq when the page was read.
    public var headSeq: UInt64

    public init(envelopes: [WireEnvelope], headSeq: UInt64) {
        self.envelopes = envelopes
        self.headSeq = headSeq
    }
}

public enum KeyBundlePutResult: Sendable, Equatable {
    case stored
    /// A bundle with a later `created_at` is already stored; it is kept.
    case stale(current: WireSignedKeyBundle)
}

/// Durable storage of topics and key bundles. Implementations must make an
/// `append` durable before it returns, since the relay acknowledges on return.
public protocol RelayStore: Sendable {
    /// Stores a batch atomically in order. Each new envelope gets the next seq
    /// of its topic (strictly increasing, gap-free); a publish whose
    /// (topic, idempotency key) is already stored gets the stored envelope
    /// back with `duplicate == true`.
    func append(_ batch: [PublishRequest], serverTimeMilliseconds: Int64) async throws -> [AppendResult]

    /// Unexpired envelopes of `topic` with seq > `after`, oldest first, at
    /// most `limit` of them.
    func fetch(topic: String, after: UInt64, limit: Int, nowMilliseconds: Int64) async throws -> FetchResult

    /// The last seq assigned on `topic`; 0 if nothing was ever published.
    func headSeq(topic: String) async throws -> UInt64

    /// Stores a bundle whose signature the caller has verified. It replaces
    /// the stored one only if both carry the same signing key and the new one
    /// is not older.
    func putKeyBundle(
        _ bundle: WireSignedKeyBundle, inboxID: InboxID, signingPublicKey: Data, createdAtMilliseconds: Int64
    ) async throws -> KeyBundlePutResult

    func keyBundle(inboxID: InboxID) async throws -> WireSignedKeyBundle?

    /// Deletes envelopes whose expiry has passed. Topic heads are kept, so a
    /// seq is never handed out twice. Returns how many were deleted.
    func deleteExpired(nowMilliseconds: Int64) async throws -> Int

    func close() async throws
}

enum RelayStoreError: Error, Equatable {
    case signingKeyMismatch
}
