import Foundation
import Hummingbird
import RallyCrypto
import RallyWire

/// The escrow API (ADR 0016): an identity creates an escrow (it counts
/// against its quota); everything after is proven with the owner's or the
/// nominee's key, so the relay learns neither holder. Every answer but a
/// deletion's is the escrow's `EscrowStatus`, its state decided by the
/// relay's clock.
enum EscrowEndpoints {
    /// Largest body of a request that carries none (request, approve,
    /// reject): the proof binds whatever was sent.
    static let maxControlBodyBytes = 256
    /// Room in a create or grant body beyond the sealed grant: keys, wait
    /// and framing, so an oversized grant is refused with its size.
    static let bodyOverheadBytes = 256

    static func addRoutes(to router: Router<RelayRequestContext>, services: RelayServices) {
        router.put("/v1/escrows/{id}") { request, context in
            await HTTPEndpoints.respond(services) { () async throws(RelayFailure) -> Data in
                try await create(request, context, services)
            }
        }
        router.post("/v1/escrows/{id}/grant") { request, context in
            await HTTPEndpoints.respond(services) { () async throws(RelayFailure) -> Data in
                try await replaceGrant(request, context, services)
            }
        }
        router.post("/v1/escrows/{id}/request") { request, context in
            await transition(request, context, services, .request, EscrowRules.request)
        }
        router.post("/v1/escrows/{id}/approve") { request, context in
            await transition(request, context, services, .approve, EscrowRules.approve)
        }
        router.post("/v1/escrows/{id}/reject") { request, context in
            await transition(request, context, services, .reject, EscrowRules.reject)
        }
        router.get("/v1/escrows/{id}") { request, context in
            await HTTPEndpoints.respond(services) { () async throws(RelayFailure) -> Data in
                try await read(request, context, services)
            }
        }
        router.delete("/v1/escrows/{id}") { request, context in
            await HTTPEndpoints.respond(services) { () async throws(RelayFailure) -> Data in
                try await delete(request, context, services)
            }
        }
    }

    static func topic(_ id: EscrowID) -> String { "escrow/" + id.rawValue }

    // MARK: Handlers

    private static func create(
        _ request: Request, _ context: RelayRequestContext, _ services: RelayServices
    ) async throws(RelayFailure) -> Data {
        let id = try escrowID(context)
        let body = try await HTTPEndpoints.readBody(request, limit: maxGrantBodyBytes(services))
        let creator = try HTTPEndpoints.authenticate(
            request, body: body, topic: topic(id), services: services, what: "creating an escrow")
        try services.checkPublishRate(ip: context.remoteIP, identity: creator, topic: topic(id))
        let create = try HTTPEndpoints.decode(body) { data throws(FrameDecodingError) in
            try FrameCodec.decode(WireEscrowCreate.self, from: data, limit: maxGrantBodyBytes(services))
        }
        let now = services.clock.nowMilliseconds
        let record = try validated(create, id: id, creator: creator, nowMilliseconds: now, services: services)
        let result = try await run(id, services) {
            try await services.escrows.create(record, maxPerCreator: services.limits.maxEscrowsPerIdentity)
        }
        // The creator holds neither key as far as the relay knows.
        return FrameCodec.encode(status(try result.get(id), to: nil, nowMilliseconds: now))
    }

    private static func replaceGrant(
        _ request: Request, _ context: RelayRequestContext, _ services: RelayServices
    ) async throws(RelayFailure) -> Data {
        let id = try escrowID(context)
        let body = try await HTTPEndpoints.readBody(request, limit: maxGrantBodyBytes(services))
        let key = try prove(request, body: body, id: id, services: services)
        try services.checkPublishRate(ip: context.remoteIP, identity: nil, topic: topic(id))
        let grant = try HTTPEndpoints.decode(body) { data throws(FrameDecodingError) in
            try FrameCodec.decode(WireEscrowGrant.self, from: data, limit: maxGrantBodyBytes(services))
        }
        try checkGrant(grant.sealedGrant, id: id, services: services)
        let sealedGrant = grant.sealedGrant
        return try await change(id, key: key, .replaceGrant, services) { record, _ in
            var record = record
            record.sealedGrant = sealedGrant
            return .success(record)
        }
    }

    /// A state change without a body: request, approve or reject.
    private static func transition(
        _ request: Request, _ context: RelayRequestContext, _ services: RelayServices, _ action: EscrowAction,
        _ rule: @Sendable (EscrowRecord, Int64) -> Result<EscrowRecord, EscrowRefusal>
    ) async -> Response {
        await HTTPEndpoints.respond(services) { () async throws(RelayFailure) -> Data in
            let id = try escrowID(context)
            let body = try await HTTPEndpoints.readBody(request, limit: maxControlBodyBytes)
            let key = try prove(request, body: body, id: id, services: services)
            try services.checkPublishRate(ip: context.remoteIP, identity: nil, topic: topic(id))
            return try await change(id, key: key, action, services, rule)
        }
    }

    private static func read(
        _ request: Request, _ context: RelayRequestContext, _ services: RelayServices
    ) async throws(RelayFailure) -> Data {
        let id = try escrowID(context)
        let key = try prove(request, body: Data(), id: id, services: services)
        let record = try await run(id, services) { try await services.escrows.record(id: id) }
        guard let record else { throw RelayFailure(.notFound, "no escrow has this id", topic: topic(id)) }
        let role = try EscrowRules.authorize(key, .read, record).get(id)
        return FrameCodec.encode(status(record, to: role, nowMilliseconds: services.clock.nowMilliseconds))
    }

    private static func delete(
        _ request: Request, _ context: RelayRequestContext, _ services: RelayServices
    ) async throws(RelayFailure) -> Data {
        let id = try escrowID(context)
        let key = try prove(request, body: Data(), id: id, services: services)
        try services.checkPublishRate(ip: context.remoteIP, identity: nil, topic: topic(id))
        let result = try await run(id, services) {
            try await services.escrows.delete(id: id) { record in
                EscrowRules.authorize(key, .delete, record).map { _ in () }
            }
        }
        try result.get(id)
        return Data()
    }

    // MARK: Steps

    /// Applies `rule` to the escrow if `key` may do `action`, both decided
    /// inside the store's transaction, and answers the status as that key
    /// sees it.
    private static func change(
        _ id: EscrowID, key: Data, _ action: EscrowAction, _ services: RelayServices,
        _ rule: @Sendable (EscrowRecord, Int64) -> Result<EscrowRecord, EscrowRefusal>
    ) async throws(RelayFailure) -> Data {
        let now = services.clock.nowMilliseconds
        let result = try await run(id, services) {
            try await services.escrows.update(id: id) { record in
                EscrowRules.authorize(key, action, record).flatMap { _ in rule(record, now) }
            }
        }
        let record = try result.get(id)
        let role = EscrowRules.role(of: key, in: record)
        return FrameCodec.encode(status(record, to: role, nowMilliseconds: now))
    }

    /// The record a valid creation stores, or the refusal naming what is
    /// wrong with it.
    private static func validated(
        _ create: WireEscrowCreate, id: EscrowID, creator: InboxID, nowMilliseconds: Int64, services: RelayServices
    ) throws(RelayFailure) -> EscrowRecord {
        let keyBytes = 32
        guard create.ownerKey.count == keyBytes, create.nomineeKey.count == keyBytes else {
            throw RelayFailure(
                .invalidRequest, "owner_key and nominee_key are \(keyBytes)-byte Ed25519 public keys", topic: topic(id))
        }
        guard create.ownerKey != create.nomineeKey else {
            throw RelayFailure(.invalidRequest, "owner_key and nominee_key must differ", topic: topic(id))
        }
        guard TopicAccess.topicID(firstAccessKey: create.ownerKey) == id.rawValue else {
            throw RelayFailure(
                .invalidRequest, "an escrow's id is the topic id its owner key founds; this one is not",
                topic: topic(id))
        }
        try checkWait(create.waitMs, id: id, services: services)
        try checkGrant(create.sealedGrant, id: id, services: services)
        return EscrowRecord(
            id: id, creator: creator.rawValue, ownerKey: create.ownerKey, nomineeKey: create.nomineeKey,
            waitMilliseconds: Int64(create.waitMs), sealedGrant: create.sealedGrant,
            createdAtMilliseconds: nowMilliseconds)
    }

    private static func checkWait(_ waitMs: UInt64, id: EscrowID, services: RelayServices) throws(RelayFailure) {
        let limits = services.limits
        let range = UInt64(limits.minEscrowWait.milliseconds)...UInt64(limits.maxEscrowWait.milliseconds)
        guard range.contains(waitMs) else {
            throw RelayFailure(
                .invalidRequest,
                "an escrow's wait is from \(describe(limits.minEscrowWait)) to \(describe(limits.maxEscrowWait)); "
                    + "this one is \(waitMs) ms",
                topic: topic(id))
        }
    }

    private static func checkGrant(_ grant: Data, id: EscrowID, services: RelayServices) throws(RelayFailure) {
        guard !grant.isEmpty else {
            throw RelayFailure(.invalidRequest, "an escrow carries a sealed grant", topic: topic(id))
        }
        let limit = services.limits.maxSealedGrantBytes
        guard grant.count <= limit else {
            throw RelayFailure(
                .payloadTooLarge, "a sealed grant is at most \(limit) bytes; this one is \(grant.count)",
                topic: topic(id))
        }
    }

    private static func maxGrantBodyBytes(_ services: RelayServices) -> Int {
        services.limits.maxSealedGrantBytes + bodyOverheadBytes
    }

    private static func escrowID(_ context: RelayRequestContext) throws(RelayFailure) -> EscrowID {
        guard let raw = context.parameters.get("id"), let id = EscrowID(raw) else {
            throw RelayFailure(.invalidRequest, "an escrow id is \(EscrowID.hexDigits) lowercase hex digits")
        }
        return id
    }

    /// The key whose `Rally-Topic-Proof` signs this request.
    private static func prove(
        _ request: Request, body: Data, id: EscrowID, services: RelayServices
    ) throws(RelayFailure) -> Data {
        try HTTPEndpoints.verifyTopicProof(request, body: body, topic: topic(id), services: services, what: "an escrow")
    }

    /// Runs a store call; a store error is logged and answered INTERNAL.
    private static func run<T>(
        _ id: EscrowID, _ services: RelayServices, _ body: () async throws -> T
    ) async throws(RelayFailure) -> T {
        do {
            return try await body()
        } catch {
            services.logger.error("escrow store failed", metadata: ["escrow": "\(id)", "error": "\(error)"])
            throw RelayFailure(.internal, "could not access the escrow store", topic: topic(id))
        }
    }

    /// The escrow as `role`'s key may see it (nil: neither key, the creator).
    static func status(_ record: EscrowRecord, to role: EscrowRole?, nowMilliseconds: Int64) -> WireEscrowStatus {
        var status = WireEscrowStatus()
        status.id = record.id.rawValue
        status.state = wire(EscrowRules.state(of: record, nowMilliseconds: nowMilliseconds))
        status.waitMs = UInt64(record.waitMilliseconds)
        status.requestedAtMs = record.requestedAtMilliseconds ?? 0
        status.releasesAtMs = EscrowRules.releasesAt(record) ?? 0
        status.rejectedAtMs = record.rejectedAtMilliseconds ?? 0
        if let grant = EscrowRules.grant(of: record, to: role, nowMilliseconds: nowMilliseconds) {
            status.sealedGrant = grant
        }
        return status
    }

    private static func wire(_ state: EscrowState) -> WireEscrowState {
        switch state {
        case .idle: .idle
        case .requested: .requested
        case .approved: .approved
        case .released: .released
        case .rejected: .rejected
        }
    }

    /// "1 minute", "90 days": a limit as a person reads it.
    static func describe(_ duration: Duration) -> String {
        let seconds = duration.components.seconds
        let units: [(seconds: Int64, name: String)] = [(86_400, "day"), (3600, "hour"), (60, "minute"), (1, "second")]
        let unit = units.first { seconds >= $0.seconds && seconds % $0.seconds == 0 } ?? (1, "second")
        let count = seconds / unit.seconds
        return "\(count) \(unit.name)\(count == 1 ? "" : "s")"
    }
}

extension Result where Failure == EscrowRefusal {
    /// The value, or the refusal as the relay answers it.
    func get(_ id: EscrowID) throws(RelayFailure) -> Success {
        switch self {
        case .success(let value): return value
        case .failure(let refusal): throw RelayFailure(refusal, topic: EscrowEndpoints.topic(id))
        }
    }
}

extension RelayFailure {
    init(_ refusal: EscrowRefusal, topic: String) {
        switch refusal {
        case .notFound: self.init(.notFound, "no escrow has this id", topic: topic)
        case .taken: self.init(.conflict, "an escrow with this id exists, created by another identity", topic: topic)
        case .quotaExceeded(let limit):
            self.init(
                .quotaExceeded, "this identity has \(limit) escrows, the most it may have; delete one first",
                topic: topic)
        case .unknownKey: self.init(.forbidden, "this key does not open this escrow", topic: topic)
        case .wrongKey(let action):
            let holder = action.needs == .nominee ? "the nominee's" : "the owner's"
            self.init(.forbidden, "\(action.phrase) needs \(holder) key", topic: topic)
        case .nothingToApprove:
            self.init(.conflict, "nobody has asked for access; there is nothing to approve", topic: topic)
        case .nothingToReject: self.init(.conflict, "there is no request to reject", topic: topic)
        }
    }
}
