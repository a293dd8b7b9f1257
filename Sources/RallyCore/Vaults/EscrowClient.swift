import Foundation
import RallyCrypto
import RallyWire

/// The relay's escrow API (ADR 0016) over one HTTP link. The creation is
/// signed by this identity (its quota); everything else is proven with the
/// owner's or the nominee's escrow key, so the relay learns neither.
struct EscrowClient: Sendable {
    let link: HTTPRelayLink

    func create(
        _ id: String, sealedGrant: Data, wait: Duration, ownerKey: Data, nomineeKey: Data
    ) async throws(RallyClientError) -> WireEscrowStatus {
        var create = WireEscrowCreate()
        create.sealedGrant = sealedGrant
        create.waitMs = UInt64(wait.milliseconds)
        create.ownerKey = ownerKey
        create.nomineeKey = nomineeKey
        return try await status(
            "PUT", id, body: FrameCodec.encode(create), signing: .identity, what: "escrow create")
    }

    /// Replaces the sealed grant (after the vault moved to a new key).
    func replaceGrant(
        _ id: String, sealedGrant: Data, owner: TopicAccess
    ) async throws(RallyClientError)
        -> WireEscrowStatus
    {
        var grant = WireEscrowGrant()
        grant.sealedGrant = sealedGrant
        return try await status(
            "POST", id, suffix: "/grant", body: FrameCodec.encode(grant), signing: .topicProof(owner),
            what: "escrow grant")
    }

    func request(_ id: String, nominee: TopicAccess) async throws(RallyClientError) -> WireEscrowStatus {
        try await status("POST", id, suffix: "/request", signing: .topicProof(nominee), what: "escrow request")
    }

    func approve(_ id: String, owner: TopicAccess) async throws(RallyClientError) -> WireEscrowStatus {
        try await status("POST", id, suffix: "/approve", signing: .topicProof(owner), what: "escrow approve")
    }

    func reject(_ id: String, owner: TopicAccess) async throws(RallyClientError) -> WireEscrowStatus {
        try await status("POST", id, suffix: "/reject", signing: .topicProof(owner), what: "escrow reject")
    }

    /// The escrow's state; the sealed grant comes only to the nominee's key
    /// once released.
    func status(_ id: String, access: TopicAccess) async throws(RallyClientError) -> WireEscrowStatus {
        try await status("GET", id, signing: .topicProof(access), what: "escrow status")
    }

    /// Deletes the escrow; one already gone is fine.
    func delete(_ id: String, owner: TopicAccess) async throws(RallyClientError) {
        do throws(RelayClientError) {
            let reply = try await link.send(
                "DELETE", Self.path(id), signing: .topicProof(owner), what: "escrow delete")
            guard reply.status == 200 || reply.status == 404 else { throw reply.failure() }
        } catch {
            throw .relay(error)
        }
    }

    static func path(_ id: String) -> String { "/v1/escrows/" + id }

    private func status(
        _ method: String, _ id: String, suffix: String = "", body: Data = Data(), signing: HTTPRelayLink.Signing,
        what: String
    ) async throws(RallyClientError) -> WireEscrowStatus {
        do throws(RelayClientError) {
            let reply = try await link.send(method, Self.path(id) + suffix, body: body, signing: signing, what: what)
            return try reply.decode(what) { data throws(FrameDecodingError) in
                try FrameCodec.decode(WireEscrowStatus.self, from: data, limit: HTTPRelayLink.maxResponseBytes)
            }
        } catch {
            throw .relay(error)
        }
    }
}
