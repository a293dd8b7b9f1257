public import Foundation

/// An escrow's id: the topic id its owner key founds (ADR 0016), 64
/// lowercase hex digits. The relay checks it against the owner key at
/// creation, so nobody can take an escrow's id before its owner.
public struct EscrowID: Hashable, Sendable, CustomStringConvertible {
    public static let hexDigits = 64
    public let rawValue: String

    public init?(_ text: String) {
        guard BlobID.isLowercaseHex(text, digits: Self.hexDigits) else { return nil }
        rawValue = text
    }

    public var description: String { rawValue }
}

/// Everything the relay keeps about one escrow. Two public keys, a sealed
/// grant and times: nothing names a vault, an owner or a nominee. The
/// creator's inbox id is kept only to count its escrows against its quota.
public struct EscrowRecord: Sendable, Equatable {
    public var id: EscrowID
    /// The inbox id that signed the creation.
    public var creator: String
    /// Ed25519 public keys: the owner's approves, rejects, replaces the
    /// grant and deletes; the nominee's requests and reads the grant.
    public var ownerKey: Data
    public var nomineeKey: Data
    public var waitMilliseconds: Int64
    /// Sealed to the nominee; the relay cannot read it.
    public var sealedGrant: Data
    /// When the standing request was made; nil when none stands.
    public var requestedAtMilliseconds: Int64?
    /// The owner approved the standing request.
    public var approved: Bool
    /// When the owner last rejected a request; cleared by a new request.
    public var rejectedAtMilliseconds: Int64?
    public var createdAtMilliseconds: Int64

    public init(
        id: EscrowID, creator: String, ownerKey: Data, nomineeKey: Data, waitMilliseconds: Int64,
        sealedGrant: Data, requestedAtMilliseconds: Int64? = nil, approved: Bool = false,
        rejectedAtMilliseconds: Int64? = nil, createdAtMilliseconds: Int64
    ) {
        self.id = id
        self.creator = creator
        self.ownerKey = ownerKey
        self.nomineeKey = nomineeKey
        self.waitMilliseconds = waitMilliseconds
        self.sealedGrant = sealedGrant
        self.requestedAtMilliseconds = requestedAtMilliseconds
        self.approved = approved
        self.rejectedAtMilliseconds = rejectedAtMilliseconds
        self.createdAtMilliseconds = createdAtMilliseconds
    }
}

/// Which of an escrow's two keys signed a request.
public enum EscrowRole: Sendable, Equatable {
    case owner
    case nominee
}

/// What a key-proven request asks to do, and whose key may ask.
public enum EscrowAction: Sendable, Equatable {
    case replaceGrant
    case request
    case approve
    case reject
    case read
    case delete

    /// The key that may do it; nil: either key.
    public var needs: EscrowRole? {
        switch self {
        case .request: .nominee
        case .read: nil
        case .replaceGrant, .approve, .reject, .delete: .owner
        }
    }

    /// Names the action in a refusal.
    public var phrase: String {
        switch self {
        case .replaceGrant: "replacing an escrow's grant"
        case .request: "requesting emergency access"
        case .approve: "approving a request"
        case .reject: "rejecting a request"
        case .read: "reading an escrow"
        case .delete: "deleting an escrow"
        }
    }
}

/// Why an escrow operation was refused; nothing was changed.
public enum EscrowRefusal: Error, Sendable, Equatable {
    case notFound
    /// The id exists, created by another identity.
    case taken
    /// The creator has `limit` escrows already.
    case quotaExceeded(limit: Int)
    /// The proof's key is neither of the escrow's keys.
    case unknownKey
    /// The proof's key is the escrow's other key.
    case wrongKey(EscrowAction)
    /// Approving when no request stands.
    case nothingToApprove
    /// Rejecting when no request stands.
    case nothingToReject
}

/// Where an escrow stands, decided from its record and the relay's clock.
public enum EscrowState: Sendable, Equatable {
    /// Never requested.
    case idle
    /// A request stands and its wait has not passed.
    case requested
    /// The owner approved the standing request.
    case approved
    /// The wait of the standing request passed without a rejection.
    case released
    /// The owner rejected the last request and no new one came.
    case rejected

    /// The nominee may read the grant.
    public var isReleased: Bool { self == .approved || self == .released }
}

/// The escrow's rules, pure: every decision is a function of the record,
/// the key and the time given, so the store applies them inside its write
/// transaction and the tests check them without a relay.
public enum EscrowRules {
    public static func state(of record: EscrowRecord, nowMilliseconds: Int64) -> EscrowState {
        guard let requestedAt = record.requestedAtMilliseconds else {
            return record.rejectedAtMilliseconds == nil ? .idle : .rejected
        }
        if record.approved { return .approved }
        return nowMilliseconds >= requestedAt + record.waitMilliseconds ? .released : .requested
    }

    /// When the standing request's grant is (or was) released; nil when no
    /// request stands. An approval releases at once, so its release time is
    /// the request's.
    public static func releasesAt(_ record: EscrowRecord) -> Int64? {
        guard let requestedAt = record.requestedAtMilliseconds else { return nil }
        return record.approved ? requestedAt : requestedAt + record.waitMilliseconds
    }

    /// The sealed grant as `role` may see it: only the nominee's key, and
    /// only once released.
    public static func grant(of record: EscrowRecord, to role: EscrowRole?, nowMilliseconds: Int64) -> Data? {
        guard role == .nominee, state(of: record, nowMilliseconds: nowMilliseconds).isReleased else { return nil }
        return record.sealedGrant
    }

    public static func role(of key: Data, in record: EscrowRecord) -> EscrowRole? {
        if key == record.ownerKey { return .owner }
        if key == record.nomineeKey { return .nominee }
        return nil
    }

    /// The role of `key` if it may do `action` on this escrow.
    public static func authorize(
        _ key: Data, _ action: EscrowAction, _ record: EscrowRecord
    ) -> Result<EscrowRole, EscrowRefusal> {
        guard let role = role(of: key, in: record) else { return .failure(.unknownKey) }
        if let needed = action.needs, needed != role { return .failure(.wrongKey(action)) }
        return .success(role)
    }

    /// The nominee asks: starts a new wait unless a request stands (a
    /// repeated request must not push its release time back).
    public static func request(_ record: EscrowRecord, nowMilliseconds: Int64) -> Result<EscrowRecord, EscrowRefusal> {
        guard record.requestedAtMilliseconds == nil else { return .success(record) }
        var record = record
        record.requestedAtMilliseconds = nowMilliseconds
        record.approved = false
        record.rejectedAtMilliseconds = nil
        return .success(record)
    }

    /// The owner approves the standing request: released at once. Once
    /// released (approved or waited out) it changes nothing.
    public static func approve(_ record: EscrowRecord, nowMilliseconds: Int64) -> Result<EscrowRecord, EscrowRefusal> {
        switch state(of: record, nowMilliseconds: nowMilliseconds) {
        case .idle, .rejected: return .failure(.nothingToApprove)
        case .approved, .released: return .success(record)
        case .requested:
            var record = record
            record.approved = true
            return .success(record)
        }
    }

    /// The owner rejects the standing request, released or not: it will
    /// never release, and the nominee must ask again to start a new wait.
    public static func reject(_ record: EscrowRecord, nowMilliseconds: Int64) -> Result<EscrowRecord, EscrowRefusal> {
        guard record.requestedAtMilliseconds != nil else { return .failure(.nothingToReject) }
        var record = record
        record.requestedAtMilliseconds = nil
        record.approved = false
        record.rejectedAtMilliseconds = nowMilliseconds
        return .success(record)
    }
}

/// Durable storage of escrows. A call that returns has reached the disk.
public protocol EscrowStore: Sendable {
    /// Stores a new escrow unless its creator has `maxPerCreator` already.
    /// The same id again by the same creator with the same owner key (a
    /// retry after a lost answer) returns the stored record unchanged.
    func create(_ record: EscrowRecord, maxPerCreator: Int) async throws -> Result<EscrowRecord, EscrowRefusal>

    func record(id: EscrowID) async throws -> EscrowRecord?

    /// Passes the record to `change` and stores its grant and request fields
    /// as `change` returns them, in one write transaction, so a decision
    /// is never made on a record another request changed meanwhile.
    func update(
        id: EscrowID, _ change: @Sendable (EscrowRecord) -> Result<EscrowRecord, EscrowRefusal>
    ) async throws -> Result<EscrowRecord, EscrowRefusal>

    /// Deletes the escrow if `allowed` accepts its record (read in the same
    /// transaction).
    func delete(
        id: EscrowID, if allowed: @Sendable (EscrowRecord) -> Result<Void, EscrowRefusal>
    ) async throws -> Result<Void, EscrowRefusal>

    func close() async throws
}
