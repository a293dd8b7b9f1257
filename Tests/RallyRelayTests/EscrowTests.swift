import Foundation
import RallyCrypto
import RallyWire
import Testing

@testable import RallyRelay

/// A relay on a manual clock, and one escrow's two capability keys and
/// creator. Requests are signed at the relay's time, so advancing the
/// clock never makes a signature stale.
struct EscrowFixture {
    typealias Reply = (status: Int, body: Data, contentType: String?)

    let clock: ManualRelayClock
    let http: RelayFixture
    let owner: TopicAccess
    let nominee: TopicAccess
    let creator: Identity
    static let grant = Data("sealed grant".utf8)
    static let waitMs: UInt64 = 60_000

    /// Starts a relay on `directory` (a fresh one when nil); `keys` are the
    /// escrow's of an earlier fixture (fresh ones when nil).
    init(
        limits: RelayLimits = .default, directory: TemporaryDirectory? = nil,
        clock: ManualRelayClock = ManualRelayClock(now: Date()), keys: EscrowFixture? = nil
    ) async throws {
        let directory = try directory ?? TemporaryDirectory()
        self.clock = clock
        owner = keys?.owner ?? Self.newAccess()
        nominee = keys?.nominee ?? Self.newAccess()
        creator = keys?.creator ?? Identity(displayName: "creator")
        let relay = try await RunningRelay.start(
            configuration: RelayConfiguration(port: 0, dataDirectory: directory.url, limits: limits),
            logger: .quiet, clock: clock)
        http = RelayFixture(directory: directory, relay: relay)
    }

    static func newAccess() -> TopicAccess { try! TopicAccess(secret: TopicAccess.newSecret()) }

    var id: String { owner.foundedTopicID }

    func body(
        owner: TopicAccess? = nil, nominee: TopicAccess? = nil, waitMs: UInt64 = waitMs, grant: Data = grant
    ) -> WireEscrowCreate {
        var create = WireEscrowCreate()
        create.ownerKey = (owner ?? self.owner).publicKey
        create.nomineeKey = (nominee ?? self.nominee).publicKey
        create.waitMs = waitMs
        create.sealedGrant = grant
        return create
    }

    /// `PUT /v1/escrows/<id>` signed by `signer` (the creator by default).
    func create(_ wire: WireEscrowCreate? = nil, id: String? = nil, by signer: Identity? = nil) async throws -> Reply {
        try await create(bytes: FrameCodec.encode(wire ?? body()), id: id, by: signer)
    }

    func create(bytes: Data, id: String? = nil, by identity: Identity? = nil) async throws -> Reply {
        let path = "/v1/escrows/" + (id ?? self.id)
        let header = HTTPAuthorization.header(
            identity: identity ?? creator, binding: http.binding("PUT", path, body: bytes, now: clock.now))
        return try await http.raw("PUT", path, body: bytes, headers: ["Authorization": header])
    }

    /// A request on this escrow (`suffix`: "/request", "/approve", …) with
    /// a `Rally-Topic-Proof` by `access` (nil: no proof).
    func call(
        _ method: String, _ suffix: String = "", body: Data? = nil, by access: TopicAccess?, id: String? = nil
    ) async throws -> Reply {
        let path = "/v1/escrows/" + (id ?? self.id) + suffix
        var headers: [String: String] = [:]
        if let access {
            headers[HTTPAuthorization.topicProofHeader] = HTTPAuthorization.topicProofHeader(
                access: access, binding: http.binding(method, path, body: body ?? Data(), now: clock.now))
        }
        return try await http.raw(method, path, body: body, headers: headers)
    }

    func status(by access: TopicAccess) async throws -> WireEscrowStatus? {
        let reply = try await call("GET", by: access)
        // An error body would decode as a status too (unknown fields).
        return reply.status == 200 ? reply.body.escrowStatus : nil
    }

    func replaceGrant(_ grant: Data, by access: TopicAccess) async throws -> Reply {
        var body = WireEscrowGrant()
        body.sealedGrant = grant
        return try await call("POST", "/grant", body: FrameCodec.encode(body), by: access)
    }

    var nowMs: Int64 { clock.nowMilliseconds }

    func stop() async { await http.stop() }
}

extension Data {
    var escrowStatus: WireEscrowStatus? { try? FrameCodec.decode(WireEscrowStatus.self, from: self, limit: 1 << 16) }
}

@Suite("Escrows: emergency access released after a wait unless the owner rejects", .timeLimit(.minutes(1)))
struct EscrowTests {
    static let day: Int64 = 86_400_000

    static func record(waitMilliseconds: Int64) -> EscrowRecord {
        let owner = EscrowFixture.newAccess()
        return EscrowRecord(
            id: EscrowID(owner.foundedTopicID)!, creator: "creator", ownerKey: owner.publicKey,
            nomineeKey: EscrowFixture.newAccess().publicKey, waitMilliseconds: waitMilliseconds,
            sealedGrant: EscrowFixture.grant, createdAtMilliseconds: 0)
    }

    @Test("the pure rules with a 7-day wait: requested until wait − 1 ms, released at the wait and after")
    func rulesAtTheEdges() throws {
        let wait = 7 * Self.day
        let start: Int64 = 1_700_000_000_000
        let idle = Self.record(waitMilliseconds: wait)
        #expect(EscrowRules.state(of: idle, nowMilliseconds: start + 10 * wait) == .idle)
        #expect(EscrowRules.releasesAt(idle) == nil)
        let requested = try EscrowRules.request(idle, nowMilliseconds: start).get()
        #expect(EscrowRules.releasesAt(requested) == start + wait)
        let expected: [(Int64, EscrowState)] = [
            (0, .requested), (wait - 1, .requested), (wait, .released), (wait + 1, .released),
        ]
        for (offset, state) in expected {
            let now = start + offset
            #expect(EscrowRules.state(of: requested, nowMilliseconds: now) == state, "at +\(offset) ms")
            let grant = EscrowRules.grant(of: requested, to: .nominee, nowMilliseconds: now)
            #expect((grant == EscrowFixture.grant) == state.isReleased, "at +\(offset) ms")
            #expect(EscrowRules.grant(of: requested, to: .owner, nowMilliseconds: now) == nil)
            #expect(EscrowRules.grant(of: requested, to: nil, nowMilliseconds: now) == nil)
        }
        // Asking again does not push the release back.
        #expect(try EscrowRules.request(requested, nowMilliseconds: start + wait - 1).get() == requested)
    }

    @Test("the pure rules: approve releases at once; reject never releases that request; a new request waits anew")
    func rulesTransitions() throws {
        let wait = 7 * Self.day
        let start: Int64 = 1_700_000_000_000
        let idle = Self.record(waitMilliseconds: wait)
        #expect(EscrowRules.approve(idle, nowMilliseconds: start) == .failure(.nothingToApprove))
        #expect(EscrowRules.reject(idle, nowMilliseconds: start) == .failure(.nothingToReject))
        let requested = try EscrowRules.request(idle, nowMilliseconds: start).get()

        let approved = try EscrowRules.approve(requested, nowMilliseconds: start + 1).get()
        #expect(EscrowRules.state(of: approved, nowMilliseconds: start + 1) == .approved)
        #expect(EscrowRules.releasesAt(approved) == start)
        #expect(EscrowRules.grant(of: approved, to: .nominee, nowMilliseconds: start + 1) == EscrowFixture.grant)
        #expect(try EscrowRules.approve(approved, nowMilliseconds: start + 2).get() == approved)
        let waitedOut = start + wait
        #expect(try EscrowRules.approve(requested, nowMilliseconds: waitedOut).get() == requested)

        for standing in [requested, approved] {
            let rejected = try EscrowRules.reject(standing, nowMilliseconds: start + 5).get()
            #expect(rejected.rejectedAtMilliseconds == start + 5 && EscrowRules.releasesAt(rejected) == nil)
            for now in [start + 5, waitedOut, waitedOut + 10 * wait] {
                #expect(EscrowRules.state(of: rejected, nowMilliseconds: now) == .rejected)
                #expect(EscrowRules.grant(of: rejected, to: .nominee, nowMilliseconds: now) == nil)
            }
            #expect(EscrowRules.reject(rejected, nowMilliseconds: start + 6) == .failure(.nothingToReject))
            #expect(EscrowRules.approve(rejected, nowMilliseconds: start + 6) == .failure(.nothingToApprove))
            let again = start + 3 * wait
            let renewed = try EscrowRules.request(rejected, nowMilliseconds: again).get()
            #expect(renewed.rejectedAtMilliseconds == nil && !renewed.approved)
            #expect(EscrowRules.state(of: renewed, nowMilliseconds: again + wait - 1) == .requested)
            #expect(EscrowRules.state(of: renewed, nowMilliseconds: again + wait) == .released)
        }
        // A released request can still be rejected.
        let late = try EscrowRules.reject(requested, nowMilliseconds: waitedOut + 1).get()
        #expect(EscrowRules.state(of: late, nowMilliseconds: waitedOut + 1) == .rejected)
    }

    @Test("the pure rules: which key may do what")
    func rulesKeys() {
        let record = Self.record(waitMilliseconds: Self.day)
        let stranger = EscrowFixture.newAccess().publicKey
        #expect(EscrowRules.authorize(record.ownerKey, .approve, record) == .success(.owner))
        #expect(EscrowRules.authorize(record.nomineeKey, .request, record) == .success(.nominee))
        #expect(EscrowRules.authorize(record.ownerKey, .read, record) == .success(.owner))
        #expect(EscrowRules.authorize(record.nomineeKey, .read, record) == .success(.nominee))
        for action in [EscrowAction.replaceGrant, .approve, .reject, .delete] {
            #expect(EscrowRules.authorize(record.nomineeKey, action, record) == .failure(.wrongKey(action)))
        }
        #expect(EscrowRules.authorize(record.ownerKey, .request, record) == .failure(.wrongKey(.request)))
        #expect(EscrowRules.authorize(stranger, .read, record) == .failure(.unknownKey))
    }

    @Test("the nominee gets the grant once the wait passes, never before; the owner's key never gets it")
    func waitReleases() async throws {
        let relay = try await EscrowFixture()
        let created = try await relay.create()
        #expect(created.status == 200)
        let idle = try #require(created.body.escrowStatus)
        #expect(idle.id == relay.id && idle.state == .idle && idle.waitMs == EscrowFixture.waitMs)
        #expect(idle.sealedGrant.isEmpty && idle.requestedAtMs == 0 && idle.releasesAtMs == 0)
        #expect(try await relay.status(by: relay.nominee)?.sealedGrant.isEmpty == true)

        let requestedAt = relay.nowMs
        let asked = try await relay.call("POST", "/request", by: relay.nominee)
        let requested = try #require(asked.body.escrowStatus)
        #expect(asked.status == 200 && requested.state == .requested)
        #expect(requested.requestedAtMs == requestedAt)
        #expect(requested.releasesAtMs == requestedAt + Int64(EscrowFixture.waitMs))
        #expect(requested.sealedGrant.isEmpty)

        relay.clock.advance(by: .seconds(59))
        let early = try #require(try await relay.status(by: relay.nominee))
        #expect(early.state == .requested && early.sealedGrant.isEmpty)
        // Asking again does not restart the wait.
        let again = try await relay.call("POST", "/request", by: relay.nominee).body.escrowStatus
        #expect(again?.requestedAtMs == requestedAt)

        relay.clock.advance(by: .seconds(2))
        let released = try #require(try await relay.status(by: relay.nominee))
        #expect(released.state == .released && released.sealedGrant == EscrowFixture.grant)
        let ownerView = try #require(try await relay.status(by: relay.owner))
        #expect(ownerView.state == .released && ownerView.sealedGrant.isEmpty)
        let stillReleased = try await relay.call("POST", "/request", by: relay.nominee).body.escrowStatus
        #expect(stillReleased?.state == .released && stillReleased?.requestedAtMs == requestedAt)
        await relay.stop()
    }

    @Test("the owner approves a request: released at once; approving when nobody asked is CONFLICT")
    func approveReleasesAtOnce() async throws {
        let relay = try await EscrowFixture()
        _ = try await relay.create()
        let early = try await relay.call("POST", "/approve", by: relay.owner)
        #expect(early.status == 409 && early.body.wireError?.code == .conflict)
        #expect(early.body.wireError?.message == "nobody has asked for access; there is nothing to approve")

        let requestedAt = relay.nowMs
        _ = try await relay.call("POST", "/request", by: relay.nominee)
        relay.clock.advance(by: .seconds(1))
        let approved = try await relay.call("POST", "/approve", by: relay.owner)
        #expect(approved.status == 200)
        #expect(approved.body.escrowStatus?.state == .approved)
        #expect(approved.body.escrowStatus?.releasesAtMs == requestedAt)
        #expect(approved.body.escrowStatus?.sealedGrant.isEmpty == true)
        let nomineeView = try #require(try await relay.status(by: relay.nominee))
        #expect(nomineeView.state == .approved && nomineeView.sealedGrant == EscrowFixture.grant)
        #expect(try await relay.status(by: relay.owner)?.sealedGrant.isEmpty == true)
        let twice = try await relay.call("POST", "/approve", by: relay.owner)
        #expect(twice.status == 200 && twice.body.escrowStatus?.state == .approved)
        await relay.stop()
    }

    @Test("a rejected request is never released, past its wait too; a new request starts a new wait")
    func rejectNeverReleases() async throws {
        let relay = try await EscrowFixture()
        _ = try await relay.create()
        let nothing = try await relay.call("POST", "/reject", by: relay.owner)
        #expect(nothing.status == 409 && nothing.body.wireError?.message == "there is no request to reject")

        _ = try await relay.call("POST", "/request", by: relay.nominee)
        relay.clock.advance(by: .seconds(10))
        let rejectedAt = relay.nowMs
        let rejected = try #require(try await relay.call("POST", "/reject", by: relay.owner).body.escrowStatus)
        #expect(rejected.state == .rejected && rejected.rejectedAtMs == rejectedAt)
        #expect(rejected.requestedAtMs == 0 && rejected.releasesAtMs == 0)
        relay.clock.advance(by: .seconds(61))
        let later = try #require(try await relay.status(by: relay.nominee))
        #expect(later.state == .rejected && later.sealedGrant.isEmpty)
        #expect(try await relay.call("POST", "/reject", by: relay.owner).status == 409)
        #expect(try await relay.call("POST", "/approve", by: relay.owner).status == 409)

        let renewedAt = relay.nowMs
        let renewed = try #require(try await relay.call("POST", "/request", by: relay.nominee).body.escrowStatus)
        #expect(renewed.state == .requested && renewed.requestedAtMs == renewedAt && renewed.rejectedAtMs == 0)
        relay.clock.advance(by: .seconds(59))
        #expect(try await relay.status(by: relay.nominee)?.sealedGrant.isEmpty == true)
        relay.clock.advance(by: .seconds(2))
        #expect(try await relay.status(by: relay.nominee)?.sealedGrant == EscrowFixture.grant)

        // A released request can be rejected too: the grant is withheld again.
        let late = try await relay.call("POST", "/reject", by: relay.owner)
        #expect(late.status == 200 && late.body.escrowStatus?.state == .rejected)
        #expect(try await relay.status(by: relay.nominee)?.sealedGrant.isEmpty == true)
        await relay.stop()
    }

    @Test("refusals: a key that is neither, an unknown escrow, the nominee on an owner action, no proof, a replay")
    func refusals() async throws {
        let relay = try await EscrowFixture()
        _ = try await relay.create()
        let stranger = EscrowFixture.newAccess()
        for (method, suffix) in [("GET", ""), ("POST", "/request"), ("POST", "/approve"), ("DELETE", "")] {
            let refused = try await relay.call(method, suffix, by: stranger)
            #expect(refused.status == 403 && refused.body.wireError?.code == .forbidden, "\(method) \(suffix)")
            #expect(refused.body.wireError?.message == "this key does not open this escrow")
            #expect(refused.body.wireError?.topic == "escrow/" + relay.id)
        }
        let unknown = try await relay.call("GET", by: stranger, id: stranger.foundedTopicID)
        #expect(unknown.status == 404 && unknown.body.wireError?.message == "no escrow has this id")
        let unknownRequest = try await relay.call("POST", "/request", by: stranger, id: stranger.foundedTopicID)
        #expect(unknownRequest.status == 404 && unknownRequest.body.wireError?.code == .notFound)

        let ownerActions = [
            ("POST", "/approve", "approving a request"), ("POST", "/reject", "rejecting a request"),
            ("DELETE", "", "deleting an escrow"),
        ]
        for (method, suffix, phrase) in ownerActions {
            let refused = try await relay.call(method, suffix, by: relay.nominee)
            #expect(refused.status == 403 && refused.body.wireError?.message == "\(phrase) needs the owner's key")
        }
        let grant = try await relay.replaceGrant(Data("other".utf8), by: relay.nominee)
        #expect(
            grant.status == 403 && grant.body.wireError?.message == "replacing an escrow's grant needs the owner's key")
        let ownerAsks = try await relay.call("POST", "/request", by: relay.owner)
        #expect(ownerAsks.status == 403 && ownerAsks.body.wireError?.message.contains("the nominee's key") == true)
        #expect(try await relay.status(by: relay.owner)?.state == .idle)

        let bare = try await relay.call("GET", by: nil)
        #expect(bare.status == 403 && bare.body.wireError?.message == "an escrow needs a Rally-Topic-Proof header")
        let path = "/v1/escrows/\(relay.id)/request"
        let proof = HTTPAuthorization.topicProofHeader(
            access: relay.nominee, binding: relay.http.binding("POST", path, now: relay.clock.now))
        let headers = [HTTPAuthorization.topicProofHeader: proof]
        #expect(try await relay.http.raw("POST", path, headers: headers).status == 200)
        let replay = try await relay.http.raw("POST", path, headers: headers)
        #expect(replay.status == 401 && replay.body.wireError?.code == .authenticationFailed)
        let malformed = try await relay.call("GET", by: relay.owner, id: "abc")
        #expect(malformed.status == 400 && malformed.body.wireError?.code == .invalidRequest)
        await relay.stop()
    }

    @Test("creation is validated: id, keys, wait bounds, grant size, the body; nothing is stored when refused")
    func createValidation() async throws {
        let relay = try await EscrowFixture()
        let other = EscrowFixture.newAccess()
        let day: UInt64 = 86_400_000
        var shortOwner = relay.body()
        shortOwner.ownerKey = relay.owner.publicKey.prefix(31)
        var shortNominee = relay.body()
        shortNominee.nomineeKey = Data(count: 16)
        let invalid: [(String, WireEscrowCreate, String?)] = [
            ("an id not founded by the owner key", relay.body(owner: other), nil),
            ("a short owner key", shortOwner, nil),
            ("a short nominee key", shortNominee, nil),
            ("the same two keys", relay.body(nominee: relay.owner), nil),
            ("a wait under a minute", relay.body(waitMs: 59_999), "from 1 minute to 90 days"),
            ("a wait over 90 days", relay.body(waitMs: 90 * day + 1), "from 1 minute to 90 days"),
            ("no grant", relay.body(grant: Data()), nil),
        ]
        for (what, create, message) in invalid {
            let refused = try await relay.create(create)
            #expect(refused.status == 400 && refused.body.wireError?.code == .invalidRequest, "\(what)")
            if let message { #expect(refused.body.wireError?.message.contains(message) == true, "\(what)") }
        }
        let huge = try await relay.create(relay.body(grant: Data(count: RelayLimits.Defaults.maxSealedGrantBytes + 1)))
        #expect(huge.status == 413 && huge.body.wireError?.code == .payloadTooLarge)
        let garbage = try await relay.create(bytes: Data([0xFF, 0xFF, 0xFF]))
        #expect(garbage.status == 400 && garbage.body.wireError?.code == .malformedFrame)
        let truncated = try await relay.create(bytes: FrameCodec.encode(relay.body()).dropLast(5))
        #expect(truncated.status == 400 && truncated.body.wireError?.code == .malformedFrame)
        let oversized = try await relay.create(bytes: Data(count: 64 << 10))
        #expect(oversized.status == 413 && oversized.body.wireError?.code == .frameTooLarge)
        let notHex = try await relay.create(id: String(repeating: "G", count: 64))
        #expect(notHex.status == 400 && notHex.body.wireError?.code == .invalidRequest)
        let path = "/v1/escrows/" + relay.id
        let unsigned = try await relay.http.raw("PUT", path, body: FrameCodec.encode(relay.body()))
        #expect(unsigned.status == 401 && unsigned.body.wireError?.code == .notAuthenticated)
        #expect(try await relay.call("GET", by: relay.owner).status == 404)

        // The bounds themselves are accepted.
        #expect(try await relay.create(relay.body(waitMs: 60_000)).status == 200)
        let longest = EscrowFixture.newAccess()
        #expect(
            try await relay.create(relay.body(owner: longest, waitMs: 90 * day), id: longest.foundedTopicID).status
                == 200)
        await relay.stop()
    }

    @Test("creating again by the same identity answers the status and changes nothing; another identity is CONFLICT")
    func retryAndConflict() async throws {
        let relay = try await EscrowFixture()
        _ = try await relay.create()
        _ = try await relay.call("POST", "/request", by: relay.nominee)
        let retry = try await relay.create()
        #expect(retry.status == 200)
        #expect(retry.body.escrowStatus?.state == .requested && retry.body.escrowStatus?.sealedGrant.isEmpty == true)
        let changed = try await relay.create(relay.body(waitMs: 120_000, grant: Data("new".utf8)))
        #expect(changed.status == 200 && changed.body.escrowStatus?.waitMs == EscrowFixture.waitMs)
        let taken = try await relay.create(by: Identity(displayName: "other"))
        #expect(taken.status == 409 && taken.body.wireError?.code == .conflict)
        relay.clock.advance(by: .seconds(61))
        #expect(try await relay.status(by: relay.nominee)?.sealedGrant == EscrowFixture.grant)
        await relay.stop()
    }

    @Test("an identity has at most maxEscrowsPerIdentity escrows; a retry and another identity are not refused")
    func quota() async throws {
        let relay = try await EscrowFixture(limits: RelayLimits(maxEscrowsPerIdentity: 2))
        let first = EscrowFixture.newAccess()
        let second = EscrowFixture.newAccess()
        let third = EscrowFixture.newAccess()
        for owner in [first, second] {
            #expect(try await relay.create(relay.body(owner: owner), id: owner.foundedTopicID).status == 200)
        }
        let full = try await relay.create(relay.body(owner: third), id: third.foundedTopicID)
        #expect(full.status == 413 && full.body.wireError?.code == .quotaExceeded)
        #expect(full.body.wireError?.message == "this identity has 2 escrows, the most it may have; delete one first")
        #expect(try await relay.create(relay.body(owner: first), id: first.foundedTopicID).status == 200)
        let other = Identity(displayName: "other")
        #expect(try await relay.create(relay.body(owner: third), id: third.foundedTopicID, by: other).status == 200)

        #expect(try await relay.call("DELETE", by: first, id: first.foundedTopicID).status == 200)
        let fourth = EscrowFixture.newAccess()
        #expect(try await relay.create(relay.body(owner: fourth), id: fourth.foundedTopicID).status == 200)
        await relay.stop()
    }

    @Test("the owner replaces the sealed grant; the state is unchanged and the nominee reads the new one")
    func grantReplacement() async throws {
        let relay = try await EscrowFixture()
        _ = try await relay.create()
        _ = try await relay.call("POST", "/request", by: relay.nominee)
        let newGrant = Data("re-sealed after a rotation".utf8)
        let replaced = try await relay.replaceGrant(newGrant, by: relay.owner)
        #expect(replaced.status == 200 && replaced.body.escrowStatus?.state == .requested)
        #expect(replaced.body.escrowStatus?.sealedGrant.isEmpty == true)
        #expect(try await relay.replaceGrant(Data(), by: relay.owner).status == 400)
        let huge = try await relay.replaceGrant(
            Data(count: RelayLimits.Defaults.maxSealedGrantBytes + 1), by: relay.owner)
        #expect(huge.status == 413 && huge.body.wireError?.code == .payloadTooLarge)
        let garbage = try await relay.call("POST", "/grant", body: Data([0xFF, 0xFF]), by: relay.owner)
        #expect(garbage.status == 400 && garbage.body.wireError?.code == .malformedFrame)
        _ = try await relay.call("POST", "/approve", by: relay.owner)
        #expect(try await relay.status(by: relay.nominee)?.sealedGrant == newGrant)
        await relay.stop()
    }

    @Test("the owner deletes an escrow; it is then unknown, and deleting again is NOT_FOUND")
    func delete() async throws {
        let relay = try await EscrowFixture()
        _ = try await relay.create()
        let deleted = try await relay.call("DELETE", by: relay.owner)
        #expect(deleted.status == 200 && deleted.body.isEmpty)
        #expect(try await relay.call("GET", by: relay.nominee).status == 404)
        let again = try await relay.call("DELETE", by: relay.owner)
        #expect(again.status == 404 && again.body.wireError?.code == .notFound)
        // Its id is free again, for its owner key only.
        #expect(try await relay.create().status == 200)
        await relay.stop()
    }

    @Test("escrows survive a relay restart on the same directory, in an owner-only file that names nothing")
    func durable() async throws {
        let directory = try TemporaryDirectory()
        let clock = ManualRelayClock(now: Date())
        let first = try await EscrowFixture(directory: directory, clock: clock)
        _ = try await first.create()
        let requestedAt = clock.nowMilliseconds
        _ = try await first.call("POST", "/request", by: first.nominee)
        await first.http.relay.stop()

        let file = directory.url.appendingPathComponent("escrows.sqlite")
        let mode = try FileManager.default.attributesOfItem(atPath: file.path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        let contents = try String(contentsOf: file, encoding: .isoLatin1)
        #expect(!contents.contains("vault"))

        let second = try await EscrowFixture(directory: directory, clock: clock, keys: first)
        let status = try #require(try await second.status(by: second.nominee))
        #expect(status.state == .requested && status.requestedAtMs == requestedAt)
        clock.advance(by: .seconds(61))
        #expect(try await second.status(by: second.nominee)?.sealedGrant == EscrowFixture.grant)
        await second.stop()
    }
}
