import Crypto
import Foundation
import GRDB
import RallyCrypto
import RallyWire

/// Nominees (ADR 0015): the owner invites, confirms and revokes; the
/// invitee accepts or declines. Everything travels as signed, sealed direct
/// messages; the owner's client checks every answer with ``NomineeRules``
/// and keeps only the token's hash.
struct NomineeService: Sendable {
    /// How long an invitation stays valid unless the owner says otherwise.
    static let defaultLifetime: Duration = .seconds(7 * 86_400)
    /// Longest name, phone or email kept for a nominee, in UTF-8 bytes.
    static let maxContactBytes = 255

    let context: ClientContext
    let vaults: VaultService
    let messages: DirectMessageService
    let emergency: EmergencyAccessService

    init(context: ClientContext, vaults: VaultService, messages: DirectMessageService) {
        self.context = context
        self.vaults = vaults
        self.messages = messages
        emergency = EmergencyAccessService(context: context, messages: messages)
    }

    // MARK: The owner

    /// Creates a pending nominee and sends them the interactive invitation.
    /// The token leaves this process only in that sealed message and in
    /// the returned link; the home keeps its hash. With `emergencyWait`,
    /// the nominee gets emergency access instead of the key (ADR 0016).
    func invite(
        vault vaultText: String, to invitee: InboxID, name rawName: String, phone: String?, email: String?,
        lifetime: Duration, emergencyWait: Duration?
    ) async throws(RallyClientError) -> NomineeInvitationSent {
        let vault = try vaults.resolve(vaultText)
        guard vault.isOwner else { throw .vault(.notOwner(vault: vault.name)) }
        let name = try Self.contact(rawName, what: "name")
        let phone = try phone.map { value throws(RallyClientError) in try Self.contact(value, what: "phone") }
        let email = try email.map { value throws(RallyClientError) in try Self.contact(value, what: "email") }
        guard lifetime > .zero else { throw .vault(.invalidName("an invitation must expire in the future")) }
        let waitMs = try emergencyWait.map { wait throws(RallyClientError) in
            try EmergencyAccessService.validWait(wait).milliseconds
        }
        let token = NomineeToken.random()
        let nowDate = context.clock.now()
        let now = ClientClock.millis(nowDate)
        let record = NomineeRecord(
            id: Randomness.bytes(16).hexString, vaultID: vault.id, name: name, phone: phone, email: email,
            inbox: invitee.rawValue, tokenHash: token.hash, status: NomineeStatus.pending.rawValue, createdAtMs: now,
            expiresAtMs: ClientClock.millis(nowDate.addingTimeInterval(lifetime.timeInterval)), updatedAtMs: now,
            emergencyWaitMs: waitMs ?? 0)
        var invitation = WireVaultInvitation()
        invitation.invitationID = record.id
        invitation.vaultID = vault.id
        invitation.vaultName = vault.name
        invitation.token = token.bytes
        invitation.inviteeName = name
        invitation.createdAtMs = now
        invitation.expiresAtMs = record.expiresAtMs
        invitation.emergencyWaitMs = record.emergencyWaitMs
        // Looked up before anything is stored: an unknown inbox fails here.
        _ = try await messages.keys.lookUp(invitee)
        try context.stored { () throws(LocalStoreError) in try context.store.write { db in try record.insert(db) } }
        // No copy is kept: the copy would hold the token.
        _ = try await messages.send(
            invitation, codec: VaultInvitationCodec(), to: invitee, messageID: nil, keepCopy: false)
        let link = try link(token: token, vaultName: vault.name, status: .pending)
        return NomineeInvitationSent(nominee: record.summary, link: link)
    }

    /// The vault's nominees and their status (the seed's "Manage
    /// Nominees"); invitations whose time ran out are shown expired.
    func nominees(vault vaultText: String) throws(RallyClientError) -> [NomineeSummary] {
        let vault = try vaults.resolve(vaultText)
        try expireOverdue()
        return try context.stored { () throws(LocalStoreError) in
            try context.store.read { db in
                try NomineeRecord.filter(Column("vault_id") == vault.id).order(Column("created_at_ms")).fetchAll(db)
            }
        }.map(\.summary)
    }

    /// Seals the vault key to a nominee who accepted: they can read the
    /// vault from now on; or, for emergency access, into an escrow the
    /// relay releases to them after a request and the wait.
    func confirm(
        vault vaultText: String, nominee nomineeText: String
    ) async throws(RallyClientError)
        -> NomineeSummary
    {
        try expireOverdue()
        let (vault, nominee) = try ownedNominee(vault: vaultText, nominee: nomineeText)
        guard nominee.nomineeStatus == .accepted else {
            throw .vault(.nomineeNotReady(name: nominee.name, status: nominee.nomineeStatus, action: "confirmed"))
        }
        try await vaults.sync(vault.id)
        let grant = try vaults.currentGrant(vault.id)
        if nominee.emergencyWaitMs > 0 {
            let access = try await emergency.establish(for: nominee, grant: grant)
            try setStatus(.active, of: nominee.id)
            try await sendAccess(to: nominee, status: .active, emergency: access)
        } else {
            try setStatus(.active, of: nominee.id)
            try await sendAccess(to: nominee, status: .active, grant: grant)
        }
        return try summary(of: nominee.id)
    }

    /// Kills the nominee's token (a later answer is refused) and, if they
    /// had the vault key, moves the vault to a new key that every other
    /// active nominee receives: what is added afterwards is out of the
    /// revoked nominee's reach.
    func revoke(
        vault vaultText: String, nominee nomineeText: String
    ) async throws(RallyClientError)
        -> NomineeSummary
    {
        let (vault, nominee) = try ownedNominee(vault: vaultText, nominee: nomineeText)
        guard nominee.nomineeStatus != .revoked else { return nominee.summary }
        // An emergency nominee may hold the key already: the relay does
        // not tell the owner whether it released it.
        let hadKey = nominee.nomineeStatus == .active
        try await emergency.close(for: nominee)
        // The key moves before the nominee is marked revoked: a rotation
        // that fails leaves them active, and running revoke again rotates.
        if hadKey { try await vaults.rotate(vault.id) }
        try setStatus(.revoked, of: nominee.id)
        if hadKey {
            let grant = try vaults.currentGrant(vault.id)
            let others = try context.stored { () throws(LocalStoreError) in
                try context.store.read { db in
                    try NomineeRecord.filter(
                        Column("vault_id") == vault.id && Column("status") == NomineeStatus.active.rawValue
                            && Column("escrow_id") == nil
                    ).fetchAll(db)
                }
            }
            for other in others { try await sendAccess(to: other, status: .active, grant: grant) }
            try await emergency.reseal(vault: vault.id, grant: grant)
        }
        try await sendAccess(to: nominee, status: .revoked, refusal: NomineeRules.Refusal.revoked)
        return try summary(of: nominee.id)
    }

    // MARK: Emergency access

    /// The relay's state of a nominee's emergency access.
    func emergencyStatus(
        vault vaultText: String, nominee nomineeText: String
    ) async throws(RallyClientError)
        -> EmergencyAccessStatus
    {
        let (vault, nominee) = try emergencyNominee(vault: vaultText, nominee: nomineeText)
        return try await emergency.status(of: nominee, vaultName: vault.name)
    }

    /// Approves (released at once) or rejects (never released for this
    /// request) a nominee's request for emergency access.
    func decideEmergency(
        vault vaultText: String, nominee nomineeText: String, approve: Bool
    ) async throws(RallyClientError) -> EmergencyAccessStatus {
        let (vault, nominee) = try emergencyNominee(vault: vaultText, nominee: nomineeText)
        guard nominee.nomineeStatus == .active else {
            throw .vault(
                .nomineeNotReady(
                    name: nominee.name, status: nominee.nomineeStatus, action: approve ? "approved" : "rejected"))
        }
        return try await emergency.decide(nominee, vaultName: vault.name, approve: approve)
    }

    private func ownedNominee(
        vault vaultText: String, nominee nomineeText: String
    ) throws(RallyClientError) -> (VaultRecord, NomineeRecord) {
        let vault = try vaults.resolve(vaultText)
        guard vault.isOwner else { throw .vault(.notOwner(vault: vault.name)) }
        return (vault, try resolveNominee(nomineeText, in: vault))
    }

    /// A nominee offered emergency access, of a vault this home owns.
    private func emergencyNominee(
        vault vaultText: String, nominee nomineeText: String
    ) throws(RallyClientError) -> (VaultRecord, NomineeRecord) {
        let (vault, nominee) = try ownedNominee(vault: vaultText, nominee: nomineeText)
        guard nominee.emergencyWaitMs > 0 else { throw .vault(.noEmergencyAccess(vault: vault.name)) }
        return (vault, nominee)
    }

    // MARK: The invitee

    /// The invitations this identity received, with their status.
    func invitations() throws(RallyClientError) -> [VaultInvitationSummary] {
        try context.stored { () throws(LocalStoreError) in
            try context.store.read { db in
                try VaultInvitationRecord.order(Column("received_at_ms")).fetchAll(db)
            }
        }.map(\.summary)
    }

    func invitation(matching tokenOrLink: String) throws(RallyClientError) -> VaultInvitationSummary? {
        try record(matching: tokenOrLink)?.summary
    }

    /// The invitation an id, a token or a nominee link names.
    private func record(matching text: String) throws(RallyClientError) -> VaultInvitationRecord? {
        if let byID = try context.stored({ () throws(LocalStoreError) in
            try context.store.read { db in try VaultInvitationRecord.fetchOne(db, key: text) }
        }) {
            return byID
        }
        let hash = try Self.token(from: text).hash
        return try context.stored { () throws(LocalStoreError) in
            try context.store.read { db in try VaultInvitationRecord.filter(Column("token_hash") == hash).fetchOne(db) }
        }
    }

    /// Accepts or declines the invitation a token, a nominee link or an
    /// invitation id names. Refused at once, with the reason, when this identity never
    /// received it, it expired, or it was answered or revoked before.
    /// - Returns: the invitation and, for an acceptance, the deep link
    ///   `rally://nominee/invite?…&status=accepted`.
    func respond(_ tokenOrLink: String, accept: Bool) async throws(RallyClientError) -> NomineeResponse {
        guard let invitation = try record(matching: tokenOrLink),
            let token = try? NomineeToken(bytes: invitation.token)
        else { throw .vault(.unknownInvitation) }
        switch invitation.nomineeStatus {
        case .revoked: throw .vault(.invitationRefused(NomineeRules.Refusal.revoked))
        case .expired: throw .vault(.invitationRefused(NomineeRules.Refusal.expired))
        case .declined: throw .vault(.invitationRefused(NomineeRules.Refusal.declined))
        case .accepted, .active: throw .vault(.invitationRefused(NomineeRules.Refusal.used))
        case .pending: break
        }
        guard ClientClock.millis(context.clock.now()) <= invitation.expiresAtMs else {
            try updateInvitation(invitation.id, status: .expired, refusal: NomineeRules.Refusal.expired)
            throw .vault(.invitationRefused(NomineeRules.Refusal.expired))
        }
        var response = WireVaultInvitationResponse()
        response.invitationID = invitation.id
        response.token = token.bytes
        response.decision = accept ? .accept : .decline
        let owner = try Self.inbox(invitation.ownerInbox)
        _ = try await messages.send(
            response, codec: VaultInvitationResponseCodec(), to: owner, messageID: nil, keepCopy: false)
        let status: NomineeStatus = accept ? .accepted : .declined
        try updateInvitation(invitation.id, status: status, refusal: nil)
        let updated = try invitationSummary(invitation.id)
        let link = accept ? try link(token: token, vaultName: invitation.vaultName, status: .accepted) : nil
        return NomineeResponse(invitation: updated, link: link)
    }

    // MARK: Messages

    /// Whether a stored message is one this service acts on.
    static func handles(_ message: StoredMessage) -> Bool {
        [
            VaultInvitationCodec.contentType, VaultInvitationResponseCodec.contentType, VaultAccessCodec.contentType,
            VaultEmergencyRequestCodec.contentType,
        ].contains { $0.description == message.contentType }
    }

    /// Whether the inbox keeps the message for `dm read`: the invitation
    /// (the invitee's to answer) and a request for emergency access (the
    /// owner's to see), not the answers, which carry the token or a key.
    static func keepsMessage(_ message: StoredMessage) -> Bool {
        [VaultInvitationCodec.contentType, VaultEmergencyRequestCodec.contentType]
            .contains { $0.description == message.contentType }
    }

    /// Acts on one nominee message, at most once per message id.
    func handle(_ message: StoredMessage) async throws(RallyClientError) {
        guard let content = try? WireEncodedContent(serializedBytes: message.encodedContent) else { return }
        switch context.codecs.decode(content).value {
        case let invitation as WireVaultInvitation: try receive(invitation, in: message)
        case let response as WireVaultInvitationResponse: try await answer(response, in: message)
        case let update as WireVaultAccessUpdate: try await apply(update, in: message)
        case let request as WireVaultEmergencyRequest: try emergency.noteRequest(request, in: message)
        default: return
        }
    }

    /// The invitee keeps the invitation (a second copy of the same id is
    /// ignored).
    private func receive(_ invitation: WireVaultInvitation, in message: StoredMessage) throws(RallyClientError) {
        guard let token = try? NomineeToken(bytes: invitation.token), !invitation.invitationID.isEmpty,
            (try? VaultEntries.validName(invitation.vaultName)) != nil
        else {
            context.logger.warning("ignored a malformed vault invitation from \(message.sender)")
            return
        }
        let record = VaultInvitationRecord(
            id: invitation.invitationID, vaultID: invitation.vaultID, vaultName: invitation.vaultName,
            ownerInbox: message.sender.rawValue, ownerName: message.senderName, token: token.bytes,
            tokenHash: token.hash, status: NomineeStatus.pending.rawValue, refusal: nil,
            receivedAtMs: ClientClock.millis(message.receivedAt), expiresAtMs: invitation.expiresAtMs,
            emergencyWaitMs: max(0, invitation.emergencyWaitMs))
        try context.stored { () throws(LocalStoreError) in
            try context.store.write { db in try record.insert(db, onConflict: .ignore) }
        }
    }

    /// The owner decides an answer with ``NomineeRules`` and tells the
    /// sender the outcome.
    private func answer(
        _ response: WireVaultInvitationResponse, in message: StoredMessage
    ) async throws(RallyClientError) {
        let now = ClientClock.millis(context.clock.now())
        let reply: Data? = try context.stored { () throws(LocalStoreError) in
            try context.store.write { db in
                if let decided = try NomineeEventRecord.fetchOne(db, key: message.id) { return decided.reply }
                guard var nominee = try NomineeRecord.fetchOne(db, key: response.invitationID) else { return nil }
                let outcome = NomineeRules.answer(
                    response, from: message.sender.rawValue, to: nominee.rules, nowMs: now)
                var update = WireVaultAccessUpdate()
                update.invitationID = nominee.id
                let status: NomineeStatus
                switch outcome {
                case .moved(let to): status = to
                case .refused(let reason, let stays):
                    status = stays
                    update.refusal = reason
                }
                update.status = status.wire
                // A stranger's answer never changes the nominee.
                if message.sender.rawValue == nominee.inbox, status != nominee.nomineeStatus {
                    nominee.status = status.rawValue
                    nominee.updatedAtMs = now
                    try nominee.update(db)
                }
                let bytes = FrameCodec.encode(update)
                try NomineeEventRecord(messageID: message.id, reply: bytes).insert(db)
                return bytes
            }
        }
        guard let reply, let update = try? FrameCodec.decode(WireVaultAccessUpdate.self, from: reply, limit: 1 << 16)
        else { return }
        // The answer goes to whoever sent the response: a stranger learns
        // only that it was refused.
        _ = try await messages.send(
            update, codec: VaultAccessCodec(), to: message.sender, messageID: Self.replyID(to: message.id),
            keepCopy: false)
    }

    /// The nominee takes the owner's answer: the status, the reason of a
    /// refusal, and the vault key once confirmed.
    private func apply(_ update: WireVaultAccessUpdate, in message: StoredMessage) async throws(RallyClientError) {
        guard
            let invitation = try context.stored({ () throws(LocalStoreError) in
                try context.store.read { db in try VaultInvitationRecord.fetchOne(db, key: update.invitationID) }
            }), invitation.ownerInbox == message.sender.rawValue, let status = NomineeStatus(update.status)
        else { return }
        if update.hasGrant, status == .active {
            guard update.grant.vaultID == invitation.vaultID, update.grant.vaultKey.count == 32 else { return }
            let owner = try await messages.keys.lookUp(message.sender)
            try install(update.grant, owner: owner)
        }
        if update.hasEmergency, status == .active {
            try emergency.remember(update.emergency, invitationID: invitation.id)
        }
        if status == .revoked {
            try context.stored { () throws(LocalStoreError) in
                try context.store.write { db in
                    _ = try VaultRecord.filter(Column("id") == invitation.vaultID && Column("is_owner") == false)
                        .deleteAll(db)
                }
            }
        }
        try updateInvitation(invitation.id, status: status, refusal: update.refusal.isEmpty ? nil : update.refusal)
    }

    /// Stores a granted vault key and the vault, reading from the grant's
    /// first seq.
    private func install(_ grant: WireVaultKeyGrant, owner: PublicIdentity) throws(RallyClientError) {
        let name = (try? VaultEntries.validName(grant.vaultName)) ?? "vault"
        let now = ClientClock.millis(context.clock.now())
        try context.stored { () throws(LocalStoreError) in
            try context.store.setSecret(grant.vaultKey, .vaultKey(vault: grant.vaultID, epoch: grant.epoch))
            try context.store.write { db in
                if var vault = try VaultRecord.fetchOne(db, key: grant.vaultID) {
                    guard !vault.isOwner else { return }
                    vault.epoch = max(vault.epoch, Int64(grant.epoch))
                    try vault.update(db)
                    return
                }
                guard let topic = try? TopicName.group(grant.vaultID) else { return }
                try VaultRecord(
                    id: grant.vaultID, name: name, ownerInbox: owner.inboxID.rawValue,
                    ownerSigningKey: owner.signingKeyBytes, isOwner: false, epoch: Int64(grant.epoch),
                    epochStartSeq: Int64(grant.startSeq), createdAtMs: now
                ).insert(db)
                if grant.startSeq > 1 { try CursorRecord.advance(topic, to: grant.startSeq - 1, db) }
            }
        }
    }

    // MARK: Helpers

    private func sendAccess(
        to nominee: NomineeRecord, status: NomineeStatus, refusal: String? = nil, grant: WireVaultKeyGrant? = nil,
        emergency: WireVaultEmergencyAccess? = nil
    ) async throws(RallyClientError) {
        var update = WireVaultAccessUpdate()
        update.invitationID = nominee.id
        update.status = status.wire
        if let refusal { update.refusal = refusal }
        if let grant { update.grant = grant }
        if let emergency { update.emergency = emergency }
        let inbox = try Self.inbox(nominee.inbox)
        _ = try await messages.send(update, codec: VaultAccessCodec(), to: inbox, messageID: nil, keepCopy: false)
    }

    private func resolveNominee(_ text: String, in vault: VaultRecord) throws(RallyClientError) -> NomineeRecord {
        let all = try context.stored { () throws(LocalStoreError) in
            try context.store.read { db in try NomineeRecord.filter(Column("vault_id") == vault.id).fetchAll(db) }
        }
        if let byID = all.first(where: { $0.id == text }) { return byID }
        let matching = all.filter { $0.name == text || $0.inbox == text }
        // The newest invitation of that person is the one meant.
        guard let newest = matching.max(by: { $0.createdAtMs < $1.createdAtMs }) else {
            throw .vault(.unknownNominee(vault: vault.name, nominee: text))
        }
        return newest
    }

    private func setStatus(_ status: NomineeStatus, of id: String) throws(RallyClientError) {
        let now = ClientClock.millis(context.clock.now())
        try context.stored { () throws(LocalStoreError) in
            try context.store.write { db in
                try db.execute(
                    sql: "UPDATE vault_nominee SET status = ?, updated_at_ms = ? WHERE id = ?",
                    arguments: [status.rawValue, now, id])
            }
        }
    }

    /// Pending invitations past their time become expired.
    private func expireOverdue() throws(RallyClientError) {
        let now = ClientClock.millis(context.clock.now())
        try context.stored { () throws(LocalStoreError) in
            try context.store.write { db in
                try db.execute(
                    sql:
                        "UPDATE vault_nominee SET status = ?, updated_at_ms = ? WHERE status = ? AND expires_at_ms < ?",
                    arguments: [NomineeStatus.expired.rawValue, now, NomineeStatus.pending.rawValue, now])
            }
        }
    }

    private func updateInvitation(_ id: String, status: NomineeStatus, refusal: String?) throws(RallyClientError) {
        try context.stored { () throws(LocalStoreError) in
            try context.store.write { db in
                try db.execute(
                    sql: "UPDATE vault_invitation SET status = ?, refusal = ? WHERE id = ?",
                    arguments: [status.rawValue, refusal, id])
            }
        }
    }

    private func summary(of id: String) throws(RallyClientError) -> NomineeSummary {
        guard
            let record = try context.stored({ () throws(LocalStoreError) in
                try context.store.read { db in try NomineeRecord.fetchOne(db, key: id) }
            })
        else { throw .vault(.unknownNominee(vault: "", nominee: id)) }
        return record.summary
    }

    private func invitationSummary(_ id: String) throws(RallyClientError) -> VaultInvitationSummary {
        guard
            let record = try context.stored({ () throws(LocalStoreError) in
                try context.store.read { db in try VaultInvitationRecord.fetchOne(db, key: id) }
            })
        else { throw .vault(.unknownInvitation) }
        return record.summary
    }

    private func link(
        token: NomineeToken, vaultName: String, status: NomineeLinkStatus
    ) throws(RallyClientError)
        -> String
    {
        do {
            return try NomineeInviteLink(token: token, vaultName: vaultName, status: status).url
        } catch {
            throw .vault(.invalidName(error.description))
        }
    }

    static func token(from text: String) throws(RallyClientError) -> NomineeToken {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.contains("://") {
            do {
                if case .nomineeInvite(let link) = try DeepLinkRouter.parse(trimmed) { return link.token }
            } catch {
                throw .vault(.invitationRefused(error.description))
            }
            throw .vault(
                .invitationRefused("this is an invite to join a group, not a vault invitation: use `rally join`"))
        }
        do {
            return try NomineeToken(text: trimmed)
        } catch {
            throw .vault(.invitationRefused(error.description))
        }
    }

    static func inbox(_ text: String) throws(RallyClientError) -> InboxID {
        do {
            return try InboxID(validating: text)
        } catch {
            throw .vault(.invalidEntry("stored inbox id \(text): \(error)"))
        }
    }

    static func contact(_ raw: String, what: String) throws(RallyClientError) -> String {
        let value = raw.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !value.isEmpty, value.utf8.count <= maxContactBytes,
            !value.unicodeScalars.contains(where: NomineeInviteLink.isControl)
        else {
            throw .vault(
                .invalidName("a nominee's \(what) is 1 to \(maxContactBytes) bytes without control characters"))
        }
        return value
    }

    /// A reply's message id derived from the message it answers: sent
    /// again after a crash, it is the same message (the relay and the
    /// recipient drop the copy).
    static func replyID(to messageID: String) -> Data {
        Data(SHA256.hash(data: Data(("rally-nominee-reply-v1" + messageID).utf8)).prefix(16))
    }
}

/// What inviting a nominee returns: the pending nominee and a link the
/// owner may share by other means (it works only for the invitee).
public struct NomineeInvitationSent: Sendable, Equatable, Codable {
    public var nominee: NomineeSummary
    public var link: String
}

/// What answering an invitation returns.
public struct NomineeResponse: Sendable, Equatable, Codable {
    public var invitation: VaultInvitationSummary
    /// `rally://nominee/invite?…&status=accepted` after an acceptance.
    public var link: String?

    public init(invitation: VaultInvitationSummary, link: String?) {
        self.invitation = invitation
        self.link = link
    }
}
