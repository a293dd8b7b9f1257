import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import RallyCrypto
import RallyWire

/// The blob API (ADR 0014): create, append a chunk at the received length,
/// complete with the SHA-256, read the status, read a range, delete. Writes
/// are signed by an identity (the blob's bytes count against its quota);
/// reads need only the id.
enum BlobEndpoints {
    static let octetStream = "application/octet-stream"
    /// Largest body of a create or complete request.
    static let maxControlBodyBytes = 256

    static func addRoutes(to router: Router<RelayRequestContext>, services: RelayServices) {
        router.put("/v1/blobs/{id}") { request, context in
            await HTTPEndpoints.respond(services) { () async throws(RelayFailure) -> Data in
                let id = try blobID(context)
                let body = try await HTTPEndpoints.readBody(request, limit: maxControlBodyBytes)
                let owner = try authorize(request, body: body, id: id, services: services)
                try services.checkPublishRate(ip: context.remoteIP, identity: owner, topic: topic(id))
                let create = try HTTPEndpoints.decode(body) { data throws(FrameDecodingError) in
                    try FrameCodec.decode(WireBlobCreate.self, from: data, limit: maxControlBodyBytes)
                }
                guard create.size > 0 else { throw RelayFailure(.invalidRequest, "a blob has at least one byte") }
                guard create.size <= UInt64(services.limits.maxBlobBytes) else {
                    throw RelayFailure(
                        .payloadTooLarge,
                        "a blob is at most \(services.limits.maxBlobBytes) bytes; this one declares \(create.size)",
                        topic: topic(id))
                }
                let quota = BlobQuota(
                    maxBlobBytes: services.limits.maxBlobBytes,
                    bytesPerIdentity: services.limits.blobQuotaBytesPerIdentity,
                    unfinishedPerIdentity: services.limits.maxUnfinishedBlobsPerIdentity)
                let result = try await run(id, services) {
                    try await services.blobs.create(
                        id: id, owner: owner.rawValue, size: Int64(create.size), quota: quota,
                        nowMilliseconds: services.clock.nowMilliseconds)
                }
                return FrameCodec.encode(status(try result.get(id)))
            }
        }
        router.patch("/v1/blobs/{id}") { request, context in
            await HTTPEndpoints.respond(services) { () async throws(RelayFailure) -> Data in
                let id = try blobID(context)
                let offset = try HTTPEndpoints.number(
                    request.uri.queryParameters["offset"], name: "offset", default: UInt64.max)
                guard offset != UInt64.max else {
                    throw RelayFailure(.invalidRequest, "an append names its offset", topic: topic(id))
                }
                let body = try await HTTPEndpoints.readBody(request, limit: services.limits.maxBlobChunkBytes)
                guard !body.isEmpty else { throw RelayFailure(.invalidRequest, "an append carries bytes") }
                let owner = try authorize(request, body: body, id: id, services: services)
                try services.checkPublishRate(ip: context.remoteIP, identity: owner, topic: topic(id))
                let result = try await run(id, services) {
                    try await services.blobs.append(
                        id: id, owner: owner.rawValue, offset: Int64(clamping: offset), bytes: body)
                }
                return FrameCodec.encode(status(try result.get(id)))
            }
        }
        router.post("/v1/blobs/{id}/complete") { request, context in
            await HTTPEndpoints.respond(services) { () async throws(RelayFailure) -> Data in
                let id = try blobID(context)
                let body = try await HTTPEndpoints.readBody(request, limit: maxControlBodyBytes)
                let owner = try authorize(request, body: body, id: id, services: services)
                let complete = try HTTPEndpoints.decode(body) { data throws(FrameDecodingError) in
                    try FrameCodec.decode(WireBlobComplete.self, from: data, limit: maxControlBodyBytes)
                }
                guard complete.sha256.count == 32 else {
                    throw RelayFailure(.invalidRequest, "a SHA-256 is 32 bytes", topic: topic(id))
                }
                let result = try await run(id, services) {
                    try await services.blobs.complete(id: id, owner: owner.rawValue, sha256: complete.sha256)
                }
                return FrameCodec.encode(status(try result.get(id)))
            }
        }
        router.get("/v1/blobs/{id}") { _, context in
            await HTTPEndpoints.respond(services) { () async throws(RelayFailure) -> Data in
                let id = try blobID(context)
                let info = try await run(id, services) { try await services.blobs.info(id: id) }
                guard let info else { throw RelayFailure(.notFound, "no blob has this id", topic: topic(id)) }
                return FrameCodec.encode(status(info))
            }
        }
        router.get("/v1/blobs/{id}/data") { request, context in
            do throws(RelayFailure) {
                let id = try blobID(context)
                let query = request.uri.queryParameters
                let offset = try HTTPEndpoints.number(query["offset"], name: "offset", default: 0)
                let length = try HTTPEndpoints.number(
                    query["length"], name: "length", default: UInt64(services.limits.maxBlobChunkBytes))
                guard length <= UInt64(services.limits.maxBlobChunkBytes) else {
                    throw RelayFailure(
                        .invalidRequest, "a read is at most \(services.limits.maxBlobChunkBytes) bytes",
                        topic: topic(id))
                }
                let result = try await run(id, services) {
                    try await services.blobs.read(id: id, offset: Int64(clamping: offset), length: Int(length))
                }
                let bytes = try result.get(id)
                return Response(
                    status: .ok, headers: [.contentType: octetStream],
                    body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
            } catch {
                return HTTPEndpoints.failureResponse(error, services: services)
            }
        }
        router.delete("/v1/blobs/{id}") { request, context in
            await HTTPEndpoints.respond(services) { () async throws(RelayFailure) -> Data in
                let id = try blobID(context)
                let owner = try authorize(request, body: Data(), id: id, services: services)
                let result = try await run(id, services) {
                    try await services.blobs.delete(id: id, owner: owner.rawValue)
                }
                try result.get(id)
                return Data()
            }
        }
    }

    static func topic(_ id: BlobID) -> String { "blob/" + id.rawValue }

    private static func blobID(_ context: RelayRequestContext) throws(RelayFailure) -> BlobID {
        guard let raw = context.parameters.get("id"), let id = BlobID(raw) else {
            throw RelayFailure(.invalidRequest, "a blob id is \(BlobID.hexDigits) lowercase hex digits")
        }
        return id
    }

    private static func authorize(
        _ request: Request, body: Data, id: BlobID, services: RelayServices
    ) throws(RelayFailure) -> InboxID {
        try HTTPEndpoints.authenticate(
            request, body: body, topic: topic(id), services: services, what: "writing a blob")
    }

    /// Runs a store call; a store error is logged and answered INTERNAL.
    private static func run<T>(
        _ id: BlobID, _ services: RelayServices, _ body: () async throws -> T
    ) async throws(RelayFailure) -> T {
        do {
            return try await body()
        } catch {
            services.logger.error("blob store failed", metadata: ["blob": "\(id)", "error": "\(error)"])
            throw RelayFailure(.internal, "could not access the blob store", topic: topic(id))
        }
    }

    private static func status(_ info: BlobInfo) -> WireBlobStatus {
        var status = WireBlobStatus()
        status.id = info.id.rawValue
        status.size = UInt64(info.size)
        status.received = UInt64(info.received)
        status.complete = info.complete
        return status
    }
}

extension Result where Failure == BlobRefusal {
    /// The value, or the refusal as the relay answers it.
    func get(_ id: BlobID) throws(RelayFailure) -> Success {
        switch self {
        case .success(let value): return value
        case .failure(let refusal): throw RelayFailure(refusal, topic: BlobEndpoints.topic(id))
        }
    }
}

extension RelayFailure {
    init(_ refusal: BlobRefusal, topic: String) {
        switch refusal {
        case .notFound: self.init(.notFound, "no blob has this id", topic: topic)
        case .notOwner: self.init(.forbidden, "another identity uploaded this blob", topic: topic)
        case .exists(let info):
            self.init(
                .conflict,
                info.complete
                    ? "this blob is complete; it cannot change"
                    : "this blob exists with a size of \(info.size) bytes",
                topic: topic, seq: UInt64(info.received))
        case .wrongOffset(let received):
            self.init(
                .conflict, "the relay holds \(received) bytes of this blob; continue at that offset", topic: topic,
                seq: UInt64(received))
        case .beyondSize(let size):
            self.init(.invalidRequest, "the chunk ends past the blob's declared \(size) bytes", topic: topic)
        case .quotaExceeded(let used, let quota):
            self.init(
                .quotaExceeded,
                "this identity's blob storage is full: \(used) of \(quota) bytes used; delete documents to make room",
                topic: topic)
        case .tooManyUnfinished(let limit):
            self.init(
                .quotaExceeded, "this identity has \(limit) unfinished uploads; finish or delete one first",
                topic: topic)
        case .integrityMismatch:
            self.init(
                .invalidRequest,
                "the blob's bytes do not match the SHA-256 given; they were discarded, upload again from byte 0",
                topic: topic)
        case .incomplete(let received, let size):
            self.init(
                .conflict, "the blob is not complete: \(received) of \(size) bytes arrived", topic: topic,
                seq: UInt64(received))
        case .outOfRange(let size):
            self.init(.invalidRequest, "the range starts past the blob's \(size) bytes", topic: topic)
        }
    }
}
