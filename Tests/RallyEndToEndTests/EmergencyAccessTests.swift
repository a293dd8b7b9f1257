import Crypto
import Foundation
import GRDB
import RallyCrypto
import RallyRelay
import RallyTestSupport
import Testing

@testable import RallyCore

/// An owner, a nominee with emergency access confirmed, and a relay whose
/// clock the test moves. The relay's clock stays within the request
/// signatures' window of real time, so the waits here are the shortest an
/// owner may set (one minute); the pure rules are tested with days.
struct EmergencyWorld {
    static let wait: Duration = .seconds(60)

    let world: NomineeWorld
    let relayClock: ManualRelayClock
    let owner: RallyClient
    let nominee: RallyClient
    let vault: VaultSummary

    static func start() async throws -> EmergencyWorld {
        let relayClock = ManualRelayClock(now: Date())
        let world = try await NomineeWorld.start(relayClock: relayClock)
        let owner = try await world.client("owner")
        let nominee = try await world.client("nominee")
        let vault = try await owner.createVault(name: "Family Papers")
        _ = try await owner.addDocument(to: vault.id, file: try world.file("will.txt", "the will"))
        let sent = try await owner.inviteNominee(
            to: vault.id, invitee: nominee.inboxID, name: "Sam", emergencyWait: wait)
        #expect(sent.nominee.emergencyAccess?.waitMs == 60_000)
        _ = try await nominee.acceptVaultInvitation(sent.link)
        let confirmed = try await owner.confirmNominee("Sam", of: vault.id)
        #expect(confirmed.status == .active && confirmed.emergencyAccess?.escrowCreated == true)
        return EmergencyWorld(world: world, relayClock: relayClock, owner: owner, nominee: nominee, vault: vault)
    }

    func stop() async {
        await owner.disconnect()
        await nominee.disconnect()
        await world.stop()
    }
}

@Suite("Emergency access: a wait the owner can cut short or reject, enforced by the relay", .timeLimit(.minutes(3)))
struct EmergencyAccessTests {
    @Test("confirmed with emergency access, the nominee holds no key and cannot read until they ask")
    func noKeyBeforeAsking() async throws {
        let e = try await EmergencyWorld.start()
        let invitation = try #require(try await e.nominee.vaultInvitations().first)
        #expect(invitation.status == .active && invitation.emergencyAccess?.escrowCreated == true)
        await #expect(throws: RallyClientError.vault(.unknownVault(e.vault.id))) {
            try await e.nominee.documents(in: e.vault.id)
        }
        let status = try await e.nominee.checkEmergencyAccess("Family Papers")
        #expect(status.state == .idle && !status.granted && status.waitMs == 60_000)
        await e.stop()
    }

    @Test(
        "the wait elapses without an answer from the owner (offline): the relay releases the key and the nominee reads")
    func waitElapses() async throws {
        let e = try await EmergencyWorld.start()
        await e.owner.disconnect()
        let requested = try await e.nominee.requestEmergencyAccess("Family Papers")
        #expect(requested.state == .requested)
        let requestedAt = try #require(requested.requestedAt)
        #expect(requested.releasesAt == requestedAt.addingTimeInterval(60))

        e.relayClock.advance(by: .milliseconds(59_999))
        let waiting = try await e.nominee.checkEmergencyAccess("Family Papers")
        #expect(waiting.state == .requested && !waiting.granted)
        await #expect(throws: RallyClientError.vault(.unknownVault(e.vault.id))) {
            try await e.nominee.documents(in: e.vault.id)
        }

        e.relayClock.advance(by: .milliseconds(1))
        let released = try await e.nominee.checkEmergencyAccess("Family Papers")
        #expect(released.state == .released && released.granted)
        #expect(try await e.nominee.documents(in: e.vault.id).map(\.name) == ["will.txt"])
        let copy = e.world.homes.path("will.copy")
        _ = try await e.nominee.fetchDocument("will.txt", from: e.vault.id, to: copy)
        #expect(try String(contentsOf: copy, encoding: .utf8) == "the will")
        await e.stop()
    }

    @Test("the owner is told of the request (a message and the nominee list) and rejects it: never granted for it")
    func ownerRejects() async throws {
        let e = try await EmergencyWorld.start()
        _ = try await e.nominee.requestEmergencyAccess(e.vault.id)

        let told = try await e.owner.nominees(of: e.vault.id)
        #expect(told.first?.emergencyAccess?.releasesAt != nil)
        let messages = try await e.owner.directMessageHistory()
        #expect(
            messages.contains { $0.displayText.hasPrefix("🆘 Emergency access requested to vault \"Family Papers\"") })
        #expect(try await e.owner.emergencyAccess(of: "Sam", in: e.vault.id).state == .requested)

        let rejected = try await e.owner.rejectEmergencyAccess(of: "Sam", in: e.vault.id)
        #expect(rejected.state == .rejected && rejected.rejectedAt != nil)
        #expect(try await e.owner.nominees(of: e.vault.id).first?.emergencyAccess?.releasesAt == nil)

        e.relayClock.advance(by: .seconds(120))
        let after = try await e.nominee.checkEmergencyAccess("Family Papers")
        #expect(after.state == .rejected && !after.granted)
        await #expect(throws: RallyClientError.vault(.unknownVault(e.vault.id))) {
            try await e.nominee.documents(in: e.vault.id)
        }
        // Nothing left to reject; a new request starts a new wait.
        await #expect(
            throws: RallyClientError.vault(.noEmergencyRequest(nominee: "Sam", action: "reject", state: .rejected))
        ) {
            try await e.owner.rejectEmergencyAccess(of: "Sam", in: e.vault.id)
        }
        let again = try await e.nominee.requestEmergencyAccess("Family Papers")
        #expect(again.state == .requested && again.releasesAt == again.requestedAt?.addingTimeInterval(60))
        await e.stop()
    }

    @Test("the owner approves at once: granted without waiting")
    func ownerApproves() async throws {
        let e = try await EmergencyWorld.start()
        await #expect(
            throws: RallyClientError.vault(.noEmergencyRequest(nominee: "Sam", action: "approve", state: .idle))
        ) {
            try await e.owner.approveEmergencyAccess(of: "Sam", in: e.vault.id)
        }
        _ = try await e.nominee.requestEmergencyAccess("Family Papers")
        let approved = try await e.owner.approveEmergencyAccess(of: "Sam", in: e.vault.id)
        #expect(approved.state == .approved)
        let granted = try await e.nominee.checkEmergencyAccess("Family Papers")
        #expect(granted.state == .approved && granted.granted)
        #expect(try await e.nominee.documents(in: e.vault.id).map(\.name) == ["will.txt"])
        await e.stop()
    }

    @Test("a key rotation re-seals the escrow: after another nominee's revocation the emergency nominee still reads")
    func rotationReseals() async throws {
        let e = try await EmergencyWorld.start()
        let other = try await e.world.client("other")
        let sent = try await e.owner.inviteNominee(to: e.vault.id, invitee: other.inboxID, name: "Kim")
        _ = try await other.acceptVaultInvitation(sent.link)
        _ = try await e.owner.confirmNominee("Kim", of: e.vault.id)
        _ = try await e.owner.revokeNominee("Kim", of: e.vault.id)
        _ = try await e.owner.addDocument(to: e.vault.id, file: try e.world.file("codicil.txt", "the codicil"))

        _ = try await e.nominee.requestEmergencyAccess("Family Papers")
        _ = try await e.owner.approveEmergencyAccess(of: "Sam", in: e.vault.id)
        #expect(try await e.nominee.checkEmergencyAccess("Family Papers").granted)
        #expect(try await e.nominee.documents(in: e.vault.id).map(\.name) == ["will.txt", "codicil.txt"])
        await other.disconnect()
        await e.stop()
    }

    @Test("revoking an emergency nominee deletes the escrow: the nominee's key opens nothing")
    func revokeDeletesEscrow() async throws {
        let e = try await EmergencyWorld.start()
        _ = try await e.nominee.requestEmergencyAccess("Family Papers")
        let invitation = try #require(
            try e.nominee.store.read { db in try VaultInvitationRecord.fetchOne(db) })
        let escrowID = try #require(invitation.escrowID)
        let secret = try #require(try e.nominee.store.secret(.escrowAccess(escrowID)))
        let key = try TopicAccess(secret: SymmetricKey(data: secret))
        _ = try await e.owner.revokeNominee("Sam", of: e.vault.id)
        e.relayClock.advance(by: .seconds(61))
        // The nominee's key, kept, opens nothing on the relay.
        await #expect(throws: RallyClientError.relay(.refused(code: .notFound, message: "no escrow has this id"))) {
            try await HTTPRelayLink.using(e.world.relay.url, identity: e.nominee.identity) {
                link throws(RallyClientError) in
                try await EscrowClient(link: link).status(escrowID, access: key)
            }
        }
        // The revocation reached the nominee by message: no access left.
        await #expect(throws: RallyClientError.vault(.noEmergencyAccess(vault: "Family Papers"))) {
            try await e.nominee.checkEmergencyAccess("Family Papers")
        }
        await e.stop()
    }

    @Test("a wait outside 1 minute to 90 days is refused before anything is stored or sent")
    func waitBounds() async throws {
        let world = try await NomineeWorld.start()
        let owner = try await world.client("owner")
        let nominee = try await world.client("nominee")
        let vault = try await owner.createVault(name: "Family Papers")
        let refusal = RallyClientError.vault(
            .invalidEmergencyWait(
                minimum: EmergencyAccessService.minimumWait, maximum: EmergencyAccessService.maximumWait))
        for wait: Duration in [.seconds(59), .seconds(90 * 86_400 + 1)] {
            await #expect(throws: refusal) {
                try await owner.inviteNominee(to: vault.id, invitee: nominee.inboxID, name: "Sam", emergencyWait: wait)
            }
        }
        #expect(try await owner.nominees(of: vault.id).isEmpty)
        #expect(try await nominee.vaultInvitations().isEmpty)
        await owner.disconnect()
        await nominee.disconnect()
        await world.stop()
    }

    @Test("the relay's escrow store names no vault, nominee or document, and holds only a sealed grant")
    func relayLearnsNothing() async throws {
        let e = try await EmergencyWorld.start()
        _ = try await e.nominee.requestEmergencyAccess("Family Papers")
        _ = try await e.owner.approveEmergencyAccess(of: "Sam", in: e.vault.id)
        _ = try await e.nominee.checkEmergencyAccess("Family Papers")
        let data = e.world.relay.directory.path("data")
        let files = try FileManager.default.contentsOfDirectory(atPath: data.path).filter { $0.hasPrefix("escrows") }
        #expect(!files.isEmpty)
        var stored = Data()
        for file in files { stored.append(try Data(contentsOf: data.appendingPathComponent(file))) }
        for secret in ["Family Papers", "Sam", "will.txt", e.nominee.inboxID.rawValue, e.vault.id] {
            #expect(stored.range(of: Data(secret.utf8)) == nil, "the escrow store holds \(secret)")
        }
        await e.stop()
    }
}
