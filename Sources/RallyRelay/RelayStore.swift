public import Foundation
public import RallyCrypto
public import RallyWire

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
    /// For a capability topic: the access key whose proof the relay has
    /// verified. The store checks it against the topic's chain in commit
    /// order. Nil for inboxes (anyone may post).
    public var accessKey: Data?
    /// A control entry, stored only if the topic's last control seq is
    /// `expectedControlSeq`.
    public var control: Bool
    public var expectedControlSeq: UInt64
    /// On a control entry: the key that becomes current once it is stored.
    public var rotateAccessKey: Data?
    /// The topic's storage quota in payload bytes; 0: none.
    public var quotaBytes: Int64

    public init(
        topic: String, payload: Data, idempotencyKey: Data = Data(), shouldPush: Bool = false,
        expiresAtMilliseconds: Int64 = 0, accessKey: Data? = nil, control: Bool = false,
        expectedControlSeq: UInt64 = 0, rotateAccessKey: Data? = nil, quotaBytes: Int64 = 0
    ) {
        self.topic = topic
        self.payload = payload
        self.idempotencyKey = idempotencyKey
        self.shouldPush = shouldPush
        self.expiresAtMilliseconds = expiresAtMilliseconds
        self.accessKey = accessKey
        self.control = control
        self.expectedControlSeq = expectedControlSeq
        self.rotateAccessKey = rotateAccessKey
        self.quotaBytes = quotaBytes
    }

    init(_ wire: WirePublish, accessKey: Data?, quotaBytes: Int64) {
        self.init(
            topic: wire.topic, payload: wire.payload, idempotencyKey: wire.idempotencyKey,
            shouldPush: wire.shouldPush, expiresAtMilliseconds: wire.expiresAtMs, accessKey: accessKey,
            control: wire.control, expectedControlSeq: wire.expectedControlSeq,
            rotateAccessKey: wire.rotateAccessKey.isEmpty ? nil : wire.rotateAccessKey, quotaBytes: quotaBytes)
    }

    /// Bytes this publish occupies in the write queue.
    var queuedBytes: Int { payload.count + topic.utf8.count + idempotencyKey.count + 128 }
}

/// Why the store refused one publish of a batch (checked in commit order
/// inside the batch's transaction).
public enum AppendRefusal: Error, Sendable, Equatable {
    /// The key is not one the topic accepts for writing (or the topic does
    /// not exist and the key does not found its id).
    case forbidden(String)
    /// The key was retired; it may read up to `lastReadableSeq`.
    case accessRevoked(lastReadableSeq: UInt64)
    /// The expected control seq is not the topic's last one.
    case conflict(lastControlSeq: UInt64)
    case quotaExceeded(String)
    /// The topic was deleted; nothing more is stored on it.
    case topicDeleted
}

/// What the relay knows about one access key of a capability topic.
public enum AccessKeyStatus: Sendable, Equatable {
    /// The topic's current key: reads are unbounded.
    case current
    /// A retired key: it may read up to and including `validThrough`.
    case retired(validThrough: UInt64)
    /// The topic exists and never had this key.
    case unknown
    /// No publish created the topic yet.
    case unregistered
    /// The topic was deleted: only its tombstone is left.
    case deleted
}

extension AccessKeyStatus {
    /// A key the topic holds: its current one (no `validThrough`), or a
    /// retired one that reads up to `validThrough`.
    static func held(validThrough: Int64?) -> Self {
        validThrough.map { .retired(validThrough: UInt64(max(0, $0))) } ?? .current
    }
}

/// What deleting a topic did.
public enum TopicDeletion: Sendable, Equatable {
    /// Its envelopes and keys are gone; a tombstone answers from now on.
    case deleted(envelopes: Int)
    /// It was deleted before (a retry).
    case alreadyDeleted
    /// The key is not the topic's current one: nothing was deleted.
    case refused(AccessKeyStatus)
}

/// What the store did with one publish of a batch.
public struct AppendResult: Sendable, Equatable {
    /// The stored envelope: the new one, or for a duplicate the one stored
    /// by the original publish.
    public var envelope: WireEnvelope
    /// True when an envelope with the same topic and idempotency key was
    /// already stored; nothing new was written.
    public var duplicate: Bool
    /// The access key this publish retired (a rotation), if any.
    public var retiredKey: Data?

    public init(envelope: WireEnvelope, duplicate: Bool, retiredKey: Data? = nil) {
        self.envelope = envelope
        self.duplicate = duplicate
        self.retiredKey = retiredKey
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
    /// For envelopes of the page that rotated the topic's access key: seq to
    /// the key they retired.
    public var retiredKeys: [UInt64: Data]

    public init(envelopes: [WireEnvelope], headSeq: UInt64, retiredKeys: [UInt64: Data] = [:]) {
        self.envelopes = envelopes
        self.headSeq = headSeq
        self.retiredKeys = retiredKeys
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
    /// back with `duplicate == true` (if its access key is one the topic has
    /// known). Access, control-seq and quota checks are made in batch order
    /// inside the transaction; a refused publish stores nothing.
    func append(
        _ batch: [PublishRequest], serverTimeMilliseconds: Int64
    ) async throws -> [Result<AppendResult, AppendRefusal>]

    /// Unexpired envelopes of `topic` with seq > `after`, oldest first, at
    /// most `limit` of them and, past the first, at most `maxBytes` of
    /// payload in total (0: no byte bound).
    func fetch(
        topic: String, after: UInt64, limit: Int, maxBytes: Int, nowMilliseconds: Int64
    ) async throws -> FetchResult

    /// What the topic's key chain says about `key`.
    func accessKeyStatus(topic: String, key: Data) async throws -> AccessKeyStatus

    /// Deletes a capability topic proven by its current access key: its
    /// envelopes, keys and counters, leaving a tombstone that keeps the
    /// name from being founded again (docs/adr/0017).
    func deleteTopic(_ topic: String, accessKey: Data, nowMilliseconds: Int64) async throws -> TopicDeletion

    /// The last seq assigned on `topic`; 0 if nothing was ever published.
    func headSeq(topic: String) async throws -> UInt64

    /// Stores a bundle whose signature the caller has verified. It replaces
    /// the stored one only if both carry the same signing key and the new one
    /// is not older.
    func putKeyBundle(
        _ bundle: WireSignedKeyBundle, inboxID: InboxID, signingPublicKey: Data, createdAtMilliseconds: Int64
    ) async throws -> KeyBundlePutResult

    func keyBundle(inboxID: InboxID) async throws -> WireSignedKeyBundle?

    /// Deletes envelopes whose expiry has passed and inbox envelopes stored
    /// before `inboxCutoffMilliseconds` (0: none). Topic heads are kept, so
    /// a seq is never handed out twice. Returns how many were deleted.
    func deleteExpired(nowMilliseconds: Int64, inboxCutoffMilliseconds: Int64) async throws -> Int

    func close() async throws
}

extension RelayStore {
    public func fetch(topic: String, after: UInt64, limit: Int, nowMilliseconds: Int64) async throws -> FetchResult {
        try await fetch(topic: topic, after: after, limit: limit, maxBytes: 0, nowMilliseconds: nowMilliseconds)
    }

    public func deleteExpired(nowMilliseconds: Int64) async throws -> Int {
        try await deleteExpired(nowMilliseconds: nowMilliseconds, inboxCutoffMilliseconds: 0)
    }
}

/// The checks every store makes on one new publish, in this order, once it
/// has read the topic's head and the status of the publish's access key
/// inside its transaction: one piece for SQLite and PostgreSQL alike.
enum AppendRules {
    /// What a store read of the topic before appending.
    struct Head: Sendable, Equatable {
        var lastSeq: Int64 = 0
        var lastControlSeq: Int64 = 0
        var bytes: Int64 = 0
    }

    /// Whether the publish is stored, and if so whether it founds the
    /// topic (its key becomes the topic's first). `keyStatus` is nil for a
    /// publish without an access key (an inbox).
    static func check(
        _ request: PublishRequest, head: Head, keyStatus: AccessKeyStatus?
    ) -> Result<Bool, AppendRefusal> {
        var founds = false
        if let accessKey = request.accessKey, let keyStatus {
            switch keyStatus {
            case .current: break
            case .retired(let validThrough): return .failure(.accessRevoked(lastReadableSeq: validThrough))
            case .unknown: return .failure(.forbidden("this access key is not the topic's current one"))
            case .deleted: return .failure(.topicDeleted)
            case .unregistered:
                guard TopicAccess.topicID(firstAccessKey: accessKey) == topicID(of: request.topic) else {
                    return .failure(.forbidden("the topic does not exist and this key does not found its id"))
                }
                founds = true
            }
        }
        let lastControlSeq = UInt64(max(0, head.lastControlSeq))
        if request.control, lastControlSeq != request.expectedControlSeq {
            return .failure(.conflict(lastControlSeq: lastControlSeq))
        }
        if request.quotaBytes > 0, head.bytes + Int64(request.payload.count) > request.quotaBytes {
            return .failure(.quotaExceeded("the topic stores at most \(request.quotaBytes) bytes"))
        }
        return .success(founds)
    }

    /// The answer to a publish that repeats a stored one (its topic and
    /// idempotency key): answered before any other check, with the stored
    /// envelope, as long as the publish's key is one the topic has known
    /// (a lost ack after a rotation must not strand its publisher).
    static func retry(of original: WireEnvelope, keyStatus: AccessKeyStatus?) -> Result<AppendResult, AppendRefusal> {
        keyStatus == .unknown
            ? .failure(.forbidden("this access key is not one of the topic's"))
            : .success(AppendResult(envelope: original, duplicate: true))
    }

    /// The key a stored publish retires: its own, when it is a control
    /// entry that rotates the topic to another key.
    static func retiredKey(by request: PublishRequest) -> Data? {
        guard request.control, let newKey = request.rotateAccessKey, let oldKey = request.accessKey, newKey != oldKey
        else { return nil }
        return oldKey
    }

    static func topicID(of topic: String) -> Substring {
        topic.firstIndex(of: "/").map { topic[topic.index(after: $0)...] } ?? ""
    }

    /// The envelope a new publish becomes at `seq`.
    static func envelope(_ request: PublishRequest, seq: Int64, serverTime: Int64) -> WireEnvelope {
        WireEnvelope(
            stored: request.topic, seq: seq, serverTime: serverTime, payload: request.payload,
            shouldPush: request.shouldPush, expiresAt: request.expiresAtMilliseconds, control: request.control)
    }
}

extension WireEnvelope {
    /// An envelope as a store gives it back: one initializer for every
    /// store's rows and records.
    init(
        stored topic: String, seq: Int64, serverTime: Int64, payload: Data, shouldPush: Bool, expiresAt: Int64,
        control: Bool
    ) {
        self.init()
        self.topic = topic
        self.seq = UInt64(max(0, seq))
        serverTimeMs = serverTime
        self.payload = payload
        self.shouldPush = shouldPush
        expiresAtMs = expiresAt
        self.control = control
    }
}

enum RelayStoreError: Error, Equatable {
    case signingKeyMismatch
}
