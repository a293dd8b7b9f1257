import Crypto
import Foundation
import RallyCrypto
import RallyWire
import Testing

@testable import RallyRelay

extension RelayFixture {
    /// A fixture over a relay the test started itself (to restart it).
    init(directory: TemporaryDirectory, relay: RunningRelay) {
        self.directory = directory
        self.relay = relay
    }

    /// A blob request signed by `identity` (nil: unsigned).
    func blob(
        _ method: String, _ path: String, body: Data? = nil, by identity: Identity? = nil,
        contentType: String = "application/x-protobuf"
    ) async throws -> (status: Int, body: Data, contentType: String?) {
        var headers: [String: String] = ["Content-Type": contentType]
        if let identity {
            headers["Authorization"] = HTTPAuthorization.header(
                identity: identity, binding: binding(method, path, body: body ?? Data()))
        }
        return try await raw(method, path, body: body, headers: headers)
    }

    func createBlob(_ id: String, size: Int, by identity: Identity) async throws -> (status: Int, body: Data) {
        var create = WireBlobCreate()
        create.size = UInt64(size)
        let result = try await blob("PUT", "/v1/blobs/\(id)", body: FrameCodec.encode(create), by: identity)
        return (result.status, result.body)
    }

    func append(
        _ id: String, offset: Int, _ bytes: Data, by identity: Identity
    ) async throws -> (
        status: Int, body: Data
    ) {
        let result = try await blob(
            "PATCH", "/v1/blobs/\(id)?offset=\(offset)", body: bytes, by: identity,
            contentType: "application/octet-stream")
        return (result.status, result.body)
    }

    func completeBlob(_ id: String, sha256: Data, by identity: Identity) async throws -> (status: Int, body: Data) {
        var complete = WireBlobComplete()
        complete.sha256 = sha256
        let result = try await blob("POST", "/v1/blobs/\(id)/complete", body: FrameCodec.encode(complete), by: identity)
        return (result.status, result.body)
    }
}

extension Data {
    var blobStatus: WireBlobStatus? { try? FrameCodec.decode(WireBlobStatus.self, from: self, limit: 1 << 16) }
}

@Suite("Blobs: chunked upload, ranged reads, quotas, integrity", .timeLimit(.minutes(1)))
struct BlobTests {
    static func newID() -> String { (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined() }
    static func sha(_ data: Data) -> Data { Data(SHA256.hash(data: data)) }

    @Test("a blob uploaded in chunks completes, reads back by range and is deleted by its owner")
    func roundTrip() async throws {
        let relay = try await RelayFixture()
        let owner = Identity(displayName: "owner")
        let id = Self.newID()
        let bytes = Data((0..<3000).map { UInt8($0 % 251) })
        #expect(try await relay.createBlob(id, size: bytes.count, by: owner).status == 200)
        // Creating it again with the same size answers its status: a
        // client that lost the answer can go on.
        let again = try await relay.createBlob(id, size: bytes.count, by: owner)
        #expect(again.status == 200 && again.body.blobStatus?.received == 0)
        let first = try await relay.append(id, offset: 0, bytes.prefix(1000), by: owner)
        #expect(first.body.blobStatus?.received == 1000)
        let second = try await relay.append(id, offset: 1000, bytes.dropFirst(1000), by: owner)
        #expect(second.body.blobStatus?.received == 3000)
        #expect(second.body.blobStatus?.complete == false)
        let done = try await relay.completeBlob(id, sha256: Self.sha(bytes), by: owner)
        #expect(done.status == 200 && done.body.blobStatus?.complete == true)

        let status = try await relay.blob("GET", "/v1/blobs/\(id)")
        #expect(status.body.blobStatus?.size == 3000 && status.body.blobStatus?.complete == true)
        let range = try await relay.blob("GET", "/v1/blobs/\(id)/data?offset=500&length=700")
        #expect(range.status == 200)
        #expect(range.contentType?.hasPrefix("application/octet-stream") == true)
        #expect(range.body == bytes.subdata(in: 500..<1200))
        let tail = try await relay.blob("GET", "/v1/blobs/\(id)/data?offset=2900&length=700")
        #expect(tail.body == bytes.suffix(100))

        let stranger = Identity(displayName: "stranger")
        let refused = try await relay.blob("DELETE", "/v1/blobs/\(id)", by: stranger)
        #expect(refused.status == 403 && refused.body.wireError?.code == .forbidden)
        #expect(try await relay.blob("DELETE", "/v1/blobs/\(id)", by: owner).status == 200)
        let gone = try await relay.blob("GET", "/v1/blobs/\(id)")
        #expect(gone.status == 404 && gone.body.wireError?.code == .notFound)
        await relay.stop()
    }

    @Test("an append not at the received length is refused CONFLICT naming where to continue; nothing is written")
    func wrongOffset() async throws {
        let relay = try await RelayFixture()
        let owner = Identity(displayName: "owner")
        let id = Self.newID()
        _ = try await relay.createBlob(id, size: 100, by: owner)
        _ = try await relay.append(id, offset: 0, Data(repeating: 1, count: 40), by: owner)
        for offset in [0, 39, 41, 100] {
            let result = try await relay.append(id, offset: offset, Data(repeating: 2, count: 10), by: owner)
            #expect(result.status == 409)
            #expect(result.body.wireError?.code == .conflict)
            #expect(result.body.wireError?.seq == 40)
        }
        let past = try await relay.append(id, offset: 40, Data(repeating: 2, count: 61), by: owner)
        #expect(past.status == 400 && past.body.wireError?.code == .invalidRequest)
        #expect(try await relay.blob("GET", "/v1/blobs/\(id)").body.blobStatus?.received == 40)
        await relay.stop()
    }

    @Test("writes need the uploader's signature: unsigned 401, another identity 403, a replayed request 401")
    func writesAreTheUploaders() async throws {
        let relay = try await RelayFixture()
        let owner = Identity(displayName: "owner")
        let id = Self.newID()
        var create = WireBlobCreate()
        create.size = 10
        let unsigned = try await relay.blob("PUT", "/v1/blobs/\(id)", body: FrameCodec.encode(create))
        #expect(unsigned.status == 401 && unsigned.body.wireError?.code == .notAuthenticated)
        _ = try await relay.createBlob(id, size: 10, by: owner)
        let stranger = Identity(displayName: "stranger")
        let append = try await relay.append(id, offset: 0, Data(count: 10), by: stranger)
        #expect(append.status == 403 && append.body.wireError?.code == .forbidden)
        let takeover = try await relay.createBlob(id, size: 10, by: stranger)
        #expect(takeover.status == 403)
        // The same signed request twice: the second is a replay.
        let body = Data(count: 5)
        let header = HTTPAuthorization.header(
            identity: owner, binding: relay.binding("PATCH", "/v1/blobs/\(id)?offset=0", body: body))
        let headers = ["Authorization": header, "Content-Type": "application/octet-stream"]
        #expect(try await relay.raw("PATCH", "/v1/blobs/\(id)?offset=0", body: body, headers: headers).status == 200)
        let replay = try await relay.raw("PATCH", "/v1/blobs/\(id)?offset=0", body: body, headers: headers)
        #expect(replay.status == 401 && replay.body.wireError?.code == .authenticationFailed)
        await relay.stop()
    }

    @Test("a wrong SHA-256 discards the bytes: the upload starts again at 0; reads before completion are refused")
    func integrity() async throws {
        let relay = try await RelayFixture()
        let owner = Identity(displayName: "owner")
        let id = Self.newID()
        let bytes = Data(repeating: 7, count: 64)
        _ = try await relay.createBlob(id, size: 64, by: owner)
        let early = try await relay.completeBlob(id, sha256: Self.sha(bytes), by: owner)
        #expect(early.status == 409 && early.body.wireError?.code == .conflict)
        _ = try await relay.append(id, offset: 0, bytes, by: owner)
        let unread = try await relay.blob("GET", "/v1/blobs/\(id)/data?offset=0&length=10")
        #expect(unread.status == 409)
        let wrong = try await relay.completeBlob(id, sha256: Self.sha(Data(repeating: 8, count: 64)), by: owner)
        #expect(wrong.status == 400 && wrong.body.wireError?.code == .invalidRequest)
        #expect(wrong.body.wireError?.message.contains("do not match the SHA-256") == true)
        #expect(try await relay.blob("GET", "/v1/blobs/\(id)").body.blobStatus?.received == 0)
        let short = try await relay.completeBlob(id, sha256: Data(count: 31), by: owner)
        #expect(short.status == 400)
        await relay.stop()
    }

    @Test("limits: a blob over the maximum, a chunk over the maximum, the identity's quota and unfinished uploads")
    func limits() async throws {
        let limits = RelayLimits(
            maxBlobBytes: 1000, maxBlobChunkBytes: 100, blobQuotaBytesPerIdentity: 1500,
            maxUnfinishedBlobsPerIdentity: 2)
        let relay = try await RelayFixture(limits: limits)
        let owner = Identity(displayName: "owner")
        let big = try await relay.createBlob(Self.newID(), size: 1001, by: owner)
        #expect(big.status == 413 && big.body.wireError?.code == .payloadTooLarge)
        let empty = try await relay.createBlob(Self.newID(), size: 0, by: owner)
        #expect(empty.status == 400)

        let id = Self.newID()
        #expect(try await relay.createBlob(id, size: 1000, by: owner).status == 200)
        let chunk = try await relay.append(id, offset: 0, Data(count: 101), by: owner)
        #expect(chunk.status == 413 && chunk.body.wireError?.code == .frameTooLarge)
        let overQuota = try await relay.createBlob(Self.newID(), size: 501, by: owner)
        #expect(overQuota.status == 413 && overQuota.body.wireError?.code == .quotaExceeded)
        #expect(overQuota.body.wireError?.message.contains("1000 of 1500 bytes used") == true)
        #expect(try await relay.createBlob(Self.newID(), size: 10, by: owner).status == 200)
        let third = try await relay.createBlob(Self.newID(), size: 10, by: owner)
        #expect(third.status == 413 && third.body.wireError?.message.contains("unfinished uploads") == true)
        // Another identity has a quota of its own.
        #expect(try await relay.createBlob(Self.newID(), size: 1000, by: Identity(displayName: "other")).status == 200)
        await relay.stop()
    }

    @Test(
        "malformed requests get typed errors",
        arguments: [
            ("GET", "/v1/blobs/abc"), ("GET", "/v1/blobs/" + String(repeating: "A", count: 64)),
            ("GET", "/v1/blobs/" + String(repeating: "0", count: 65)),
            ("GET", "/v1/blobs/\(String(repeating: "0", count: 64))/data?offset=x"),
            ("GET", "/v1/blobs/\(String(repeating: "0", count: 64))/data?length=99999999"),
        ])
    func malformed(method: String, path: String) async throws {
        let relay = try await RelayFixture()
        let result = try await relay.blob(method, path)
        #expect(result.status == 400)
        #expect(result.body.wireError?.code == .invalidRequest)
        await relay.stop()
    }

    @Test("a create body that is not a BlobCreate, truncated or oversized, is MALFORMED_FRAME or FRAME_TOO_LARGE")
    func malformedBodies() async throws {
        let relay = try await RelayFixture()
        let owner = Identity(displayName: "owner")
        let id = Self.newID()
        let garbage = try await relay.blob("PUT", "/v1/blobs/\(id)", body: Data([0xFF, 0xFF, 0xFF]), by: owner)
        #expect(garbage.status == 400 && garbage.body.wireError?.code == .malformedFrame)
        let huge = try await relay.blob("PUT", "/v1/blobs/\(id)", body: Data(count: 4096), by: owner)
        #expect(huge.status == 413 && huge.body.wireError?.code == .frameTooLarge)
        #expect(try await relay.blob("GET", "/v1/blobs/\(id)").status == 404)
        await relay.stop()
    }

    @Test("a complete blob survives a relay restart on the same directory")
    func durable() async throws {
        let directory = try TemporaryDirectory()
        let configuration = RelayConfiguration(port: 0, dataDirectory: directory.url)
        let owner = Identity(displayName: "owner")
        let id = Self.newID()
        let bytes = Data((0..<5000).map { UInt8($0 % 13) })
        do {
            let relay = try await RunningRelay.start(configuration: configuration, logger: .quiet)
            let fixture = RelayFixture(directory: directory, relay: relay)
            _ = try await fixture.createBlob(id, size: bytes.count, by: owner)
            _ = try await fixture.append(id, offset: 0, bytes, by: owner)
            _ = try await fixture.completeBlob(id, sha256: Self.sha(bytes), by: owner)
            await relay.stop()
        }
        let relay = try await RunningRelay.start(configuration: configuration, logger: .quiet)
        let fixture = RelayFixture(directory: directory, relay: relay)
        let read = try await fixture.blob("GET", "/v1/blobs/\(id)/data?offset=0&length=5000")
        #expect(read.body == bytes)
        await fixture.stop()
    }

    @Test(
        "unfinished uploads older than the cutoff are deleted, finished ones kept; the store's file names no vault or document"
    )
    func pruning() async throws {
        let directory = try TemporaryDirectory()
        let store = try FileBlobStore(dataDirectory: directory.url)
        let quota = BlobQuota(maxBlobBytes: 1 << 20, bytesPerIdentity: 1 << 20, unfinishedPerIdentity: 8)
        let old = try #require(BlobID(Self.newID()))
        let done = try #require(BlobID(Self.newID()))
        let fresh = try #require(BlobID(Self.newID()))
        _ = try await store.create(id: old, owner: "a", size: 4, quota: quota, nowMilliseconds: 1000).get()
        _ = try await store.create(id: done, owner: "a", size: 4, quota: quota, nowMilliseconds: 1000).get()
        _ = try await store.append(id: done, owner: "a", offset: 0, bytes: Data([1, 2, 3, 4])).get()
        _ = try await store.complete(id: done, owner: "a", sha256: Self.sha(Data([1, 2, 3, 4]))).get()
        _ = try await store.create(id: fresh, owner: "a", size: 4, quota: quota, nowMilliseconds: 5000).get()
        #expect(try await store.deleteUnfinished(startedBefore: 2000) == 1)
        #expect(try await store.info(id: old) == nil)
        #expect(try await store.info(id: done)?.complete == true)
        #expect(try await store.info(id: fresh) != nil)
        try await store.close()
        let columns = try String(contentsOf: directory.url.appendingPathComponent("blobs.sqlite"), encoding: .isoLatin1)
        #expect(!columns.contains("vault") && !columns.contains("document"))
        directory.remove()
    }
}
