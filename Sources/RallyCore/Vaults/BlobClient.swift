import Foundation
import RallyWire

/// The relay's blob API (ADR 0014) over one HTTP link: every request is
/// one bounded exchange, so a transfer holds one chunk at a time.
struct BlobClient: Sendable {
    static let octetStream = "application/octet-stream"

    let link: HTTPRelayLink

    /// Starts (or, with the same size, finds again) the upload of `id`.
    func create(_ id: String, size: Int64) async throws(RelayClientError) -> WireBlobStatus {
        var create = WireBlobCreate()
        create.size = UInt64(size)
        let reply = try await link.send(
            "PUT", path(id), body: FrameCodec.encode(create), signing: .identity, what: "blob create")
        return try decodeStatus(reply)
    }

    /// Appends `bytes` at `offset` (the bytes the relay holds).
    func append(_ id: String, offset: Int64, bytes: Data) async throws(RelayClientError) -> WireBlobStatus {
        let reply = try await link.send(
            "PATCH", path(id), query: "offset=\(offset)", body: bytes, contentType: Self.octetStream,
            signing: .identity, what: "blob append")
        return try decodeStatus(reply)
    }

    func complete(_ id: String, sha256: Data) async throws(RelayClientError) -> WireBlobStatus {
        var complete = WireBlobComplete()
        complete.sha256 = sha256
        let reply = try await link.send(
            "POST", path(id) + "/complete", body: FrameCodec.encode(complete), signing: .identity,
            what: "blob complete", timeout: Self.completeTimeout)
        return try decodeStatus(reply)
    }

    /// The relay hashes the whole blob before it answers a completion.
    static let completeTimeout: Duration = .seconds(120)

    /// The blob's status, or nil when the relay has none with this id.
    func status(_ id: String) async throws(RelayClientError) -> WireBlobStatus? {
        let reply = try await link.send("GET", path(id), signing: .unsigned, what: "blob status")
        if reply.status == 404 { return nil }
        return try decodeStatus(reply)
    }

    /// `length` bytes of a complete blob from `offset` (fewer at its end).
    func read(_ id: String, offset: Int64, length: Int) async throws(RelayClientError) -> Data {
        let reply = try await link.send(
            "GET", path(id) + "/data", query: "offset=\(offset)&length=\(length)", signing: .unsigned,
            what: "blob read", limit: length)
        guard reply.status == 200 else { throw reply.failure() }
        guard !reply.oversized else { throw .protocolViolation("the relay sent more than the \(length) bytes asked") }
        guard reply.contentType?.lowercased().hasPrefix(Self.octetStream) == true else {
            throw .protocolViolation("expected \(Self.octetStream), got \(reply.contentType ?? "no content type")")
        }
        return reply.body
    }

    func delete(_ id: String) async throws(RelayClientError) {
        let reply = try await link.send("DELETE", path(id), signing: .identity, what: "blob delete")
        guard reply.status == 200 || reply.status == 404 else { throw reply.failure() }
    }

    private func path(_ id: String) -> String { "/v1/blobs/" + id }

    private func decodeStatus(_ reply: HTTPRelayReply) throws(RelayClientError) -> WireBlobStatus {
        try reply.decode("blob status") { data throws(FrameDecodingError) in
            try FrameCodec.decode(WireBlobStatus.self, from: data, limit: HTTPRelayLink.maxResponseBytes)
        }
    }
}
