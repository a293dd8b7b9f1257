import Foundation
import RallyCrypto
import RallyRelay
import RallyTestSupport
import RallyWire
import Testing

@testable import RallyCore

/// An owner and invitees on one real relay.
struct NomineeWorld {
    let relay: TestRelay
    let homes: TemporaryDirectory
    let clock: SettableClock

    static func start(relayClock: any RelayClock = SystemRelayClock()) async throws -> NomineeWorld {
        NomineeWorld(
            relay: try await TestRelay.start(clock: relayClock), homes: TemporaryDirectory("rally-nominee"),
            clock: SettableClock())
    }

    func client(_ name: String) async throws -> RallyClient {
        try await RallyClient.create(
            home: homes.path(name), relayURL: relay.url, displayName: name, logger: TestLogger.quiet,
            clock: clock.clientClock)
    }

    func file(_ name: String, _ text: String) throws -> URL {
        let url = homes.path(name)
        try Data(text.utf8).write(to: url)
        return url
    }

    func stop() async {
        await relay.stop()
        homes.remove()
    }
}

/// A wall clock the test moves: expiry without waiting.
final class SettableClock: @unchecked Sendable {
    // `@unchecked Sendable`: `offset` is only touched under `lock`.
    private let lock = NSLock()
    private var offset: TimeInterval = 0

    func advance(by seconds: TimeInterval) { lock.withLock { offset += seconds } }

    var clientClock: ClientClock {
        ClientClock(
            now: { [self] in Date().addingTimeInterval(lock.withLock { offset }) },
            sleep: { try await Task.sleep(for: $0) })
    }
}

@Suite("Nominees: invite, accept or decline, confirm, revoke", .timeLimit(.minutes(3)))
struct NomineeTests {
    @Test(
        "the whole flow: invite, accept via the link, confirm, the nominee reads; revoke, and what is added next is out of reach"
    )
    func wholeFlow() async throws {
        let world = try await NomineeWorld.start()
        let owner = try await world.client("owner")
        let nominee = try await world.client("nominee")
        let vault = try await owner.createVault(name: "Family Papers")
        _ = try await owner.addDocument(to: vault.id, file: try world.file("deed.txt", "the deed"))

        let sent = try await owner.inviteNominee(
            to: vault.id, invitee: nominee.inboxID, name: "Sam", phone: "+1 555 0100", email: "sam@example.org")
        #expect(sent.nominee.status == .pending && sent.nominee.phone == "+1 555 0100")
        #expect(sent.link.hasPrefix("rally://nominee/invite?"))

        // The invitee sees the interactive message and the invitation.
        let invitations = try await nominee.vaultInvitations()
        #expect(invitations.map(\.title) == ["🔐 Vault Invitation"])
        #expect(invitations.first?.vaultName == "Family Papers")
        let messages = try await nominee.directMessageHistory()
        #expect(messages.contains { $0.displayText.contains("🔐 Vault Invitation: \"Family Papers\"") })

        let accepted = try await nominee.acceptVaultInvitation(sent.link)
        #expect(accepted.invitation.title == "✅ Vault Access Accepted")
        let link = try #require(accepted.link)
        guard case .nomineeInvite(let parsed) = try DeepLinkRouter.parse(link) else {
            Issue.record("not a nominee link: \(link)")
            return
        }
        #expect(parsed.status == .accepted && parsed.vaultName == "Family Papers")

        // The owner's client takes the answer from its inbox.
        #expect(try await owner.nominees(of: vault.id).map(\.status) == [.accepted])
        // Nothing to read before the owner confirms.
        await #expect(throws: RallyClientError.vault(.unknownVault(vault.id))) {
            try await nominee.documents(in: vault.id)
        }
        let confirmed = try await owner.confirmNominee("Sam", of: vault.id)
        #expect(confirmed.status == .active)
        #expect(try await nominee.documents(in: vault.id).map(\.name) == ["deed.txt"])
        #expect(try await nominee.vaultInvitations().map(\.status) == [.active])
        let copy = world.homes.path("deed.copy")
        _ = try await nominee.fetchDocument("deed.txt", from: vault.id, to: copy)
        #expect(try String(contentsOf: copy, encoding: .utf8) == "the deed")
        // A nominee reads; only the owner writes.
        await #expect(throws: RallyClientError.vault(.notOwner(vault: "Family Papers"))) {
            try await nominee.addDocument(to: vault.id, file: try world.file("mine.txt", "x"))
        }

        // Revoke: the key rotates; a document added afterwards is out of
        // the revoked nominee's reach, and the old token is dead.
        let revoked = try await owner.revokeNominee("Sam", of: vault.id)
        #expect(revoked.status == .revoked)
        _ = try await owner.addDocument(to: vault.id, file: try world.file("codicil.txt", "the codicil"))
        #expect(try await owner.documents(in: vault.id).map(\.name) == ["deed.txt", "codicil.txt"])
        await #expect(throws: RallyClientError.vault(.accessRevoked(vault: "Family Papers"))) {
            try await nominee.documents(in: vault.id)
        }
        #expect(try await nominee.vaultInvitations().map(\.status) == [.revoked])
        await #expect(throws: RallyClientError.vault(.invitationRefused("The owner revoked this invitation."))) {
            try await nominee.acceptVaultInvitation(sent.link)
        }
        await owner.disconnect()
        await nominee.disconnect()
        await world.stop()
    }

    @Test("a revoked nominee who kept the old key reads nothing added after the rotation, even from the relay directly")
    func keptKeysAreUseless() async throws {
        let world = try await NomineeWorld.start()
        let owner = try await world.client("owner")
        let nominee = try await world.client("nominee")
        let stay = try await world.client("stay")
        let vault = try await owner.createVault(name: "Deeds")
        for client in [nominee, stay] {
            let sent = try await owner.inviteNominee(to: vault.id, invitee: client.inboxID, name: "\(client.inboxID)")
            _ = try await client.acceptVaultInvitation(sent.link)
            _ = try await owner.confirmNominee(client.inboxID.rawValue, of: vault.id)
            #expect(try await client.documents(in: vault.id).isEmpty)
        }
        // The revoked nominee's home, copied before the revocation: a
        // client that ignores the revocation and keeps every key.
        let kept = world.homes.path("kept")
        try FileManager.default.copyItem(at: world.homes.path("nominee"), to: kept)

        _ = try await owner.revokeNominee(nominee.inboxID.rawValue, of: vault.id)
        _ = try await owner.addDocument(to: vault.id, file: try world.file("after.txt", "after the rotation"))
        // The nominee who stays gets the new key and reads it.
        #expect(try await stay.documents(in: vault.id).map(\.name) == ["after.txt"])

        let rogue = try RallyClient.open(
            home: kept, relayURL: world.relay.url, logger: TestLogger.quiet, clock: world.clock.clientClock)
        // Reading its (stale) inbox would deliver the revocation; the rogue
        // goes to the vault's log directly, with the key it kept.
        await #expect {
            _ = try await rogue.vaults.documents(vault.id)
        } throws: { error in
            switch error as? RallyClientError {
            case .vault(.awaitingKey)?, .relay(.accessRevoked)?: true
            default: false
            }
        }
        let seen = try rogue.store.vaultDocuments(vault.id).map(\.name)
        #expect(!seen.contains("after.txt"))
        await owner.disconnect()
        await world.stop()
    }

    @Test(
        "refusals, each with a clear message and nothing changed: another identity's token, a replay, an expired and a revoked token"
    )
    func refusals() async throws {
        let world = try await NomineeWorld.start()
        let owner = try await world.client("owner")
        let invitee = try await world.client("invitee")
        let stranger = try await world.client("stranger")
        let vault = try await owner.createVault(name: "Deeds")
        let sent = try await owner.inviteNominee(to: vault.id, invitee: invitee.inboxID, name: "Ina")

        // The link forwarded to someone else: their client never received it.
        await #expect(throws: RallyClientError.vault(.unknownInvitation)) {
            try await stranger.acceptVaultInvitation(sent.link)
        }
        #expect(try await owner.nominees(of: vault.id).map(\.status) == [.pending])

        _ = try await invitee.acceptVaultInvitation(sent.link)
        await #expect(throws: RallyClientError.vault(.invitationRefused("This invitation was already used."))) {
            try await invitee.acceptVaultInvitation(sent.link)
        }
        #expect(try await owner.nominees(of: vault.id).map(\.status) == [.accepted])

        // Expired: the owner's clock and the invitee's agree it is past.
        let late = try await owner.inviteNominee(
            to: vault.id, invitee: invitee.inboxID, name: "Ina again", lifetime: .seconds(60))
        _ = try await invitee.vaultInvitations()
        world.clock.advance(by: 61)
        await #expect(
            throws: RallyClientError.vault(.invitationRefused("This invitation expired. Ask the owner for a new one."))
        ) {
            try await invitee.acceptVaultInvitation(late.link)
        }
        #expect(try await owner.nominees(of: vault.id).map(\.status) == [.accepted, .expired])

        // Revoked before it was answered.
        let third = try await owner.inviteNominee(to: vault.id, invitee: invitee.inboxID, name: "Ina third")
        _ = try await invitee.vaultInvitations()
        _ = try await owner.revokeNominee(third.nominee.id, of: vault.id)
        await #expect(throws: RallyClientError.vault(.invitationRefused("The owner revoked this invitation."))) {
            try await invitee.acceptVaultInvitation(third.link)
        }
        // Malformed tokens and links.
        await #expect {
            try await invitee.acceptVaultInvitation("rally://nominee/invite?token=short&vault=x")
        } throws: { error in
            guard case .vault(.invitationRefused(let reason))? = error as? RallyClientError else { return false }
            return reason.contains("token") && !reason.contains("short&")
        }
        await owner.disconnect()
        await world.stop()
    }

    @Test("a decline is stored and shown to the owner; the invitee's message reads declined")
    func decline() async throws {
        let world = try await NomineeWorld.start()
        let owner = try await world.client("owner")
        let invitee = try await world.client("invitee")
        let vault = try await owner.createVault(name: "Deeds")
        let sent = try await owner.inviteNominee(to: vault.id, invitee: invitee.inboxID, name: "Dee")
        let declined = try await invitee.declineVaultInvitation(sent.link)
        #expect(declined.invitation.status == .declined && declined.link == nil)
        #expect(try await owner.nominees(of: vault.id).map(\.status) == [.declined])
        await #expect(
            throws: RallyClientError.vault(.nomineeNotReady(name: "Dee", status: .declined, action: "confirmed"))
        ) {
            try await owner.confirmNominee("Dee", of: vault.id)
        }
        await owner.disconnect()
        await world.stop()
    }

    @Test("the owner's home and the relay hold the token's hash only, never the token")
    func onlyHashes() async throws {
        let world = try await NomineeWorld.start()
        let owner = try await world.client("owner")
        let invitee = try await world.client("invitee")
        let vault = try await owner.createVault(name: "Deeds")
        let sent = try await owner.inviteNominee(to: vault.id, invitee: invitee.inboxID, name: "Ina")
        _ = try await invitee.acceptVaultInvitation(sent.link)
        _ = try await owner.nominees(of: vault.id)
        guard case .nomineeInvite(let link) = try DeepLinkRouter.parse(sent.link) else { return }
        await owner.disconnect()
        await world.relay.relay.stop()
        for directory in [world.homes.path("owner"), world.relay.directory.path("data")] {
            let enumerator = FileManager.default.enumerator(
                at: directory, includingPropertiesForKeys: [.isRegularFileKey])
            while let url = enumerator?.nextObject() as? URL {
                guard (try? url.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true else { continue }
                let data = try Data(contentsOf: url)
                #expect(data.range(of: link.token.bytes) == nil, "\(url.lastPathComponent) holds the token")
                #expect(data.range(of: Data(link.token.text.utf8)) == nil, "\(url.lastPathComponent) holds the token")
            }
        }
        world.homes.remove()
        world.relay.directory.remove()
    }

    @Test("a tampered invitation is dropped by the inbox; a tampered answer is refused by the owner; nothing changes")
    func tampered() async throws {
        let world = try await NomineeWorld.start()
        let owner = try await world.client("owner")
        let invitee = try await world.client("invitee")
        let vault = try await owner.createVault(name: "Deeds")
        let sent = try await owner.inviteNominee(to: vault.id, invitee: invitee.inboxID, name: "Ina")

        // The relay (or anyone) alters a sealed invitation in transit.
        var forged = WireVaultInvitation()
        forged.invitationID = String(repeating: "f", count: 32)
        forged.vaultID = vault.id
        forged.vaultName = "Deeds (forged)"
        forged.token = NomineeToken.random().bytes
        forged.expiresAtMs = Int64.max
        var body = WireMessageBody()
        body.messageID = MessageSealing.newMessageID()
        body.sender = owner.identity.publicIdentity.wireBundle
        body.recipient = invitee.inboxID.rawValue
        body.sentAtMs = 1
        body.content = try VaultInvitationCodec().encode(forged)
        var sealed = try MessageSealing.seal(
            MessageSealing.sign(body, by: owner.identity), to: invitee.identity.publicIdentity)
        sealed[sealed.count - 5] ^= 0x01
        let connection = try await RelayConnection.connect(to: world.relay.url, identity: nil, logger: TestLogger.quiet)
        _ = try await connection.publish(
            topic: try .inbox(invitee.inboxID.rawValue), payload: sealed, idempotencyKey: MessageSealing.newMessageID())
        await connection.close()
        let report = try await invitee.syncInbox()
        #expect(report.rejected.count == 1)
        #expect(try await invitee.vaultInvitations().map(\.vaultName) == ["Deeds"])

        // An answer whose token was altered: refused, the nominee unchanged.
        var answer = WireVaultInvitationResponse()
        answer.invitationID = sent.nominee.id
        answer.token = NomineeToken.random().bytes
        answer.decision = .accept
        _ = try await invitee.send(answer, codec: VaultInvitationResponseCodec(), to: owner.inboxID, keepCopy: false)
        #expect(try await owner.nominees(of: vault.id).map(\.status) == [.pending])
        let told = try await invitee.vaultInvitations()
        #expect(told.first?.refusal == "This is not the invitation's token; the link may be damaged.")
        #expect(told.first?.status == .pending)
        // The genuine answer still works.
        _ = try await invitee.acceptVaultInvitation(sent.link)
        #expect(try await owner.nominees(of: vault.id).map(\.status) == [.accepted])
        await owner.disconnect()
        await world.stop()
    }

    @Test(
        "a nominee who writes into the vault's topic (they hold its key) neither adds a document nor blocks the owner")
    func nomineeCannotWrite() async throws {
        let world = try await NomineeWorld.start()
        let owner = try await world.client("owner")
        let nominee = try await world.client("nominee")
        let vault = try await owner.createVault(name: "Deeds")
        let sent = try await owner.inviteNominee(to: vault.id, invitee: nominee.inboxID, name: "Nia")
        _ = try await nominee.acceptVaultInvitation(sent.link)
        _ = try await owner.confirmNominee("Nia", of: vault.id)
        #expect(try await nominee.documents(in: vault.id).isEmpty)

        // The nominee's own key to the topic, and a document entry in the
        // owner's format, signed by the nominee, as a plain and as a
        // control entry.
        let key = try nominee.vaults.key(vault.id, epoch: 0)
        let access = try TopicAccess(secret: TopicAccess.secret(fromEpochKey: key))
        var document = WireVaultDocument()
        document.documentID = "forged"
        document.name = "forged.txt"
        var entry = WireVaultEntry()
        entry.vaultID = vault.id
        entry.body = .documentAdded(document)
        let payload = try VaultEntries.seal(entry, owner: nominee.identity, vaultKey: key)
        let connection = try await RelayConnection.connect(
            to: world.relay.url, identity: nominee.identity, logger: TestLogger.quiet)
        let topic = try TopicName.group(vault.id)
        // A control entry right after the owner's first, then a plain one:
        // the owner's cursor is then past the last control entry.
        for control in [true, false] {
            _ = try await connection.publish(
                topic: topic, payload: payload, idempotencyKey: MessageSealing.newMessageID(), shouldPush: false,
                expiresAt: nil, access: access, control: control, expectedControlSeq: control ? 1 : 0,
                rotateAccessKey: nil)
        }
        await connection.close()

        // The owner still writes, and both read only the owner's document.
        _ = try await owner.addDocument(to: vault.id, file: try world.file("real.txt", "real"))
        #expect(try await owner.documents(in: vault.id).map(\.name) == ["real.txt"])
        #expect(try await nominee.documents(in: vault.id).map(\.name) == ["real.txt"])
        await owner.disconnect()
        await world.stop()
    }

    @Test("a revocation whose key rotation fails leaves the nominee active; revoking again rotates, then revokes")
    func revokeRetried() async throws {
        let relay = try await TestRelay.start()
        let homes = TemporaryDirectory("rally-nominee-retry")
        func client(_ name: String) async throws -> RallyClient {
            try await RallyClient.create(
                home: homes.path(name), relayURL: relay.url, displayName: name, logger: TestLogger.quiet)
        }
        let owner = try await client("owner")
        let nominee = try await client("nominee")
        let vault = try await owner.createVault(name: "Family Papers")
        let sent = try await owner.inviteNominee(to: vault.id, invitee: nominee.inboxID, name: "Sam")
        _ = try await nominee.acceptVaultInvitation(sent.link)
        _ = try await owner.confirmNominee("Sam", of: vault.id)

        // The relay is gone while the owner revokes: the key cannot move,
        // so Sam is not marked revoked either.
        await relay.stopKeepingData()
        await #expect(throws: RallyClientError.self) { try await owner.revokeNominee("Sam", of: vault.id) }
        #expect(try owner.nominees.nominees(vault: vault.id).map(\.status) == [.active])

        let restarted = try await TestRelay.start(port: relay.relay.port, directory: relay.directory)
        let revoked = try await owner.revokeNominee("Sam", of: vault.id)
        #expect(revoked.status == .revoked)
        let file = homes.path("codicil.txt")
        try Data("the codicil".utf8).write(to: file)
        _ = try await owner.addDocument(to: vault.id, file: file)
        await #expect(throws: RallyClientError.vault(.accessRevoked(vault: "Family Papers"))) {
            try await nominee.documents(in: vault.id)
        }
        await owner.disconnect()
        await nominee.disconnect()
        await restarted.stop()
        homes.remove()
    }
}
