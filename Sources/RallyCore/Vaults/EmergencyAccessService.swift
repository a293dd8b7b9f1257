import Crypto
public import Foundation
import GRDB
import RallyCrypto
import RallyWire

/// Emergency access (ADR 0016): instead of the vault key, a nominee gets a
/// key to an escrow on the relay that holds the key sealed to them. They
/// ask; the relay releases it when the owner approves, or when the wait has
/// passed without a rejection: the owner need not be online.
struct EmergencyAccessService: Sendable {
    /// The shortest and longest wait an owner may set; the relay enforces
    /// the same bounds.
    static let minimumWait: Duration = .seconds(60)
    static let maximumWait: Duration = .seconds(90 * 86_400)

    let context: ClientContext
    let messages: DirectMessageService

    static func validWait(_ wait: Duration) throws(RallyClientError) -> Duration {
        guard wait >= minimumWait, wait <= maximumWait else {
            throw .vault(.invalidEmergencyWait(minimum: minimumWait, maximum: maximumWait))
        }
        return wait
    }

    // MARK: The owner

    /// Creates the nominee's escrow holding `grant` sealed to them (after a
    /// crash, the same escrow again) and returns what the nominee needs to
    /// use it.
    func establish(
        for nominee: NomineeRecord, grant: WireVaultKeyGrant
    ) async throws(RallyClientError) -> WireVaultEmergencyAccess {
        let keys = try escrowKeys(for: nominee)
        let sealed = try await sealedGrant(grant, to: nominee)
        _ = try await withEscrows { escrows throws(RallyClientError) in
            try await escrows.create(
                keys.id, sealedGrant: sealed, wait: .milliseconds(nominee.emergencyWaitMs),
                ownerKey: keys.owner.publicKey, nomineeKey: keys.nominee.publicKey)
        }
        var access = WireVaultEmergencyAccess()
        access.escrowID = keys.id
        access.accessSecret = keys.nominee.secretBytes
        access.waitMs = UInt64(nominee.emergencyWaitMs)
        return access
    }

    /// Seals the vault's new key into every escrow of its active nominees.
    func reseal(vault vaultID: String, grant: WireVaultKeyGrant) async throws(RallyClientError) {
        let nominees = try context.stored { () throws(LocalStoreError) in
            try context.store.read { db in
                try NomineeRecord.filter(
                    Column("vault_id") == vaultID && Column("status") == NomineeStatus.active.rawValue
                        && Column("escrow_id") != nil
                ).fetchAll(db)
            }
        }
        guard !nominees.isEmpty else { return }
        // One link for all of them: a vault with many emergency nominees
        // re-seals over one connection.
        try await withEscrows { escrows throws(RallyClientError) in
            for nominee in nominees {
                let keys = try escrowKeys(for: nominee, creating: false)
                let sealed = try await sealedGrant(grant, to: nominee)
                _ = try await escrows.replaceGrant(keys.id, sealedGrant: sealed, owner: keys.owner)
            }
        }
    }

    /// Deletes the nominee's escrow, if they have one (again after a
    /// crash: an escrow whose seed is gone was deleted already).
    func close(for nominee: NomineeRecord) async throws(RallyClientError) {
        guard let escrowID = nominee.escrowID,
            try context.stored({ () throws(LocalStoreError) in try context.store.secret(.escrowSeed(escrowID)) })
                != nil
        else { return }
        let keys = try escrowKeys(for: nominee, creating: false)
        try await withEscrows { escrows throws(RallyClientError) in
            try await escrows.delete(escrowID, owner: keys.owner)
        }
        try context.stored { () throws(LocalStoreError) in try context.store.removeSecret(.escrowSeed(escrowID)) }
    }

    /// The relay's state of the nominee's escrow.
    func status(of nominee: NomineeRecord, vaultName: String) async throws(RallyClientError) -> EmergencyAccessStatus {
        let keys = try escrowKeys(for: nominee, creating: false)
        let status = try await withEscrows { escrows throws(RallyClientError) in
            try await escrows.status(keys.id, access: keys.owner)
        }
        return EmergencyAccessStatus(status, vaultName: vaultName, nomineeName: nominee.name, granted: false)
    }

    /// Approves the nominee's request (the relay releases the key at once)
    /// or rejects it (never released for this request).
    func decide(
        _ nominee: NomineeRecord, vaultName: String, approve: Bool
    ) async throws(RallyClientError) -> EmergencyAccessStatus {
        let keys = try escrowKeys(for: nominee, creating: false)
        let status = try await withEscrows { escrows throws(RallyClientError) in
            try await decide(nominee, keys: keys, approve: approve, on: escrows)
        }
        try noteState(status, of: nominee.id)
        return EmergencyAccessStatus(status, vaultName: vaultName, nomineeName: nominee.name, granted: false)
    }

    private func decide(
        _ nominee: NomineeRecord, keys: EscrowKeys, approve: Bool, on escrows: EscrowClient
    ) async throws(RallyClientError) -> WireEscrowStatus {
        let action = approve ? "approve" : "reject"
        let current = try await escrows.status(keys.id, access: keys.owner)
        let state = EmergencyAccessState(current.state)
        guard state.standsRequested else {
            throw .vault(.noEmergencyRequest(nominee: nominee.name, action: action, state: state))
        }
        do {
            return
                approve
                ? try await escrows.approve(keys.id, owner: keys.owner)
                : try await escrows.reject(keys.id, owner: keys.owner)
        } catch {
            // The state moved between the two requests.
            if case .relay(.conflict) = error {
                throw .vault(.noEmergencyRequest(nominee: nominee.name, action: action, state: .idle))
            }
            throw error
        }
    }

    /// The owner takes note of a request the nominee announced (the relay's
    /// state is the one that counts; this is what `nominee list` shows).
    func noteRequest(_ request: WireVaultEmergencyRequest, in message: StoredMessage) throws(RallyClientError) {
        try context.stored { () throws(LocalStoreError) in
            try context.store.write { db in
                guard var nominee = try NomineeRecord.fetchOne(db, key: request.invitationID),
                    nominee.inbox == message.sender.rawValue, nominee.escrowID != nil
                else { return }
                nominee.emergencyRequestedAtMs = request.requestedAtMs
                nominee.emergencyReleasesAtMs = request.releasesAtMs
                try nominee.update(db)
            }
        }
    }

    private func noteState(_ status: WireEscrowStatus, of nomineeID: String) throws(RallyClientError) {
        let stands = EmergencyAccessState(status.state).standsRequested
        try context.stored { () throws(LocalStoreError) in
            try context.store.write { db in
                try db.execute(
                    sql: """
                        UPDATE vault_nominee SET emergency_requested_at_ms = ?, emergency_releases_at_ms = ?
                        WHERE id = ?
                        """,
                    arguments: [
                        stands ? status.requestedAtMs : nil, stands ? status.releasesAtMs : nil, nomineeID,
                    ])
            }
        }
    }

    /// The escrow keys of a nominee, from the seed this home keeps; the
    /// seed and the escrow id are stored before the escrow is created, so a
    /// retry after a crash names the same escrow.
    private func escrowKeys(for nominee: NomineeRecord, creating: Bool = true) throws(RallyClientError) -> EscrowKeys {
        if let escrowID = nominee.escrowID,
            let seed = try context.stored({ () throws(LocalStoreError) in
                try context.store.secret(.escrowSeed(escrowID))
            })
        {
            return try keys(SymmetricKey(data: seed))
        }
        guard creating else { throw .vault(.noEmergencyAccess(vault: nominee.name)) }
        let seed = EscrowKeys.newSeed()
        let keys = try keys(seed)
        try context.stored { () throws(LocalStoreError) in
            try context.store.setSecret(seed.withUnsafeBytes { Data($0) }, .escrowSeed(keys.id))
            try context.store.write { db in
                try db.execute(
                    sql: "UPDATE vault_nominee SET escrow_id = ? WHERE id = ?", arguments: [keys.id, nominee.id])
            }
        }
        return keys
    }

    private func keys(_ seed: SymmetricKey) throws(RallyClientError) -> EscrowKeys {
        do {
            return try EscrowKeys(seed: seed)
        } catch {
            throw .vault(.invalidEntry("escrow seed: \(error)"))
        }
    }

    /// The grant as a direct message signed by this identity and sealed to
    /// the nominee: the relay cannot read it, the nominee can check who
    /// made it.
    private func sealedGrant(
        _ grant: WireVaultKeyGrant, to nominee: NomineeRecord
    ) async throws(RallyClientError) -> Data {
        var update = WireVaultAccessUpdate()
        update.invitationID = nominee.id
        update.status = NomineeStatus.active.wire
        update.grant = grant
        let recipient = try await messages.keys.lookUp(try NomineeService.inbox(nominee.inbox))
        return try messages.seal(
            update, codec: VaultAccessCodec(), to: recipient, messageID: nil, at: context.clock.now()
        ).sealed
    }

    // MARK: The nominee

    /// Keeps the key to the escrow the owner made for this invitation.
    func remember(_ access: WireVaultEmergencyAccess, invitationID: String) throws(RallyClientError) {
        guard access.escrowID.utf8.count == 64, access.accessSecret.count == TopicAccess.secretByteCount,
            access.waitMs > 0
        else {
            context.logger.warning("ignored malformed emergency access for invitation \(invitationID)")
            return
        }
        try context.stored { () throws(LocalStoreError) in
            try context.store.setSecret(access.accessSecret, .escrowAccess(access.escrowID))
            try context.store.write { db in
                try db.execute(
                    sql: "UPDATE vault_invitation SET escrow_id = ?, emergency_wait_ms = ? WHERE id = ?",
                    arguments: [access.escrowID, Int64(clamping: access.waitMs), invitationID])
            }
        }
    }

    /// Asks the relay for the vault and tells the owner, who may approve
    /// or reject before the wait ends.
    func request(_ invitationText: String) async throws(RallyClientError) -> EmergencyAccessStatus {
        let (invitation, access) = try escrow(invitationText)
        let status = try await withEscrows { escrows throws(RallyClientError) in
            try await escrows.request(invitation.escrowID ?? "", nominee: access)
        }
        if EmergencyAccessState(status.state) == .requested {
            var notice = WireVaultEmergencyRequest()
            notice.invitationID = invitation.id
            notice.requestedAtMs = status.requestedAtMs
            notice.releasesAtMs = status.releasesAtMs
            notice.vaultName = invitation.vaultName
            _ = try await messages.send(
                notice, codec: VaultEmergencyRequestCodec(), to: try NomineeService.inbox(invitation.ownerInbox),
                messageID: Self.noticeID(escrow: invitation.escrowID ?? "", requestedAtMs: status.requestedAtMs),
                keepCopy: true)
        }
        return EmergencyAccessStatus(status, vaultName: invitation.vaultName, nomineeName: nil, granted: false)
    }

    /// The relay's state of this nominee's escrow and, once released, the
    /// owner's sealed grant opened as the message it is.
    func check(
        _ invitationText: String
    ) async throws(RallyClientError) -> (status: EmergencyAccessStatus, grant: StoredMessage?) {
        let (invitation, access) = try escrow(invitationText)
        let escrowID = invitation.escrowID ?? ""
        let status = try await withEscrows { escrows throws(RallyClientError) in
            try await escrows.status(escrowID, access: access)
        }
        var grant: StoredMessage?
        if !status.sealedGrant.isEmpty {
            var envelope = WireEnvelope()
            envelope.topic = "escrow/" + escrowID
            envelope.payload = status.sealedGrant
            switch InboxProcessor(identity: context.identity, codecs: context.codecs).process(
                envelope, receivedAt: context.clock.now())
            {
            case .success(let message) where message.sender.rawValue == invitation.ownerInbox:
                grant = message
            case .success(let message):
                throw .vault(.invalidEntry("the escrow's grant was sealed by \(message.sender), not the vault's owner"))
            case .failure(let rejection):
                throw .vault(.invalidEntry("the escrow's grant does not open: \(rejection.reason)"))
            }
        }
        return (
            EmergencyAccessStatus(status, vaultName: invitation.vaultName, nomineeName: nil, granted: grant != nil),
            grant
        )
    }

    /// The invitation an id, a vault name or a vault id names, with its
    /// escrow key.
    private func escrow(_ text: String) throws(RallyClientError) -> (VaultInvitationRecord, TopicAccess) {
        let all = try context.stored { () throws(LocalStoreError) in
            try context.store.read { db in try VaultInvitationRecord.order(Column("received_at_ms").desc).fetchAll(db) }
        }
        guard let invitation = all.first(where: { $0.id == text || $0.vaultID == text || $0.vaultName == text })
        else { throw .vault(.unknownInvitation) }
        guard invitation.nomineeStatus == .active, let escrowID = invitation.escrowID,
            let secret = try context.stored({ () throws(LocalStoreError) in
                try context.store.secret(.escrowAccess(escrowID))
            }),
            let access = try? TopicAccess(secret: SymmetricKey(data: secret))
        else { throw .vault(.noEmergencyAccess(vault: invitation.vaultName)) }
        return (invitation, access)
    }

    /// One notice per request, whatever retries: the recipient drops a
    /// second copy.
    static func noticeID(escrow: String, requestedAtMs: Int64) -> Data {
        Data(SHA256.hash(data: Data("rally-emergency-request-v1\(escrow)/\(requestedAtMs)".utf8)).prefix(16))
    }

    private func withEscrows<T>(
        _ body: (EscrowClient) async throws(RallyClientError) -> T
    ) async throws(RallyClientError) -> T {
        try await HTTPRelayLink.using(context.relayURL, identity: context.identity) { link throws(RallyClientError) in
            try await body(EscrowClient(link: link))
        }
    }
}

/// Where a nominee's emergency access stands on the relay.
public enum EmergencyAccessState: String, Sendable, Codable, Equatable {
    /// Nobody asked (or the last request was rejected and no new one came).
    case idle
    /// Asked; released at `releasesAt` unless the owner rejects.
    case requested
    /// The owner approved: released.
    case approved
    /// The wait passed without a rejection: released.
    case released
    /// The owner rejected the last request.
    case rejected

    init(_ wire: WireEscrowState) {
        switch wire {
        case .requested: self = .requested
        case .approved: self = .approved
        case .released: self = .released
        case .rejected: self = .rejected
        case .idle, .unspecified, .UNRECOGNIZED: self = .idle
        }
    }

    /// A request stands: waiting, or released by approval or by time.
    var standsRequested: Bool { self == .requested || self == .approved || self == .released }
}

/// A nominee's emergency access as the relay holds it.
public struct EmergencyAccessStatus: Sendable, Equatable, Codable {
    public var vaultName: String
    /// The nominee's name, on the owner's side.
    public var nomineeName: String?
    public var state: EmergencyAccessState
    public var waitMs: Int64
    public var requestedAt: Date?
    /// When the relay releases the key unless the owner rejects (or did,
    /// once approved or released).
    public var releasesAt: Date?
    public var rejectedAt: Date?
    /// The nominee holds the vault key from the escrow now.
    public var granted: Bool

    init(_ wire: WireEscrowStatus, vaultName: String, nomineeName: String?, granted: Bool) {
        let state = EmergencyAccessState(wire.state)
        self.vaultName = vaultName
        self.nomineeName = nomineeName
        self.state = state
        waitMs = Int64(clamping: wire.waitMs)
        requestedAt = state.standsRequested ? Date(milliseconds: wire.requestedAtMs) : nil
        releasesAt = state.standsRequested ? Date(milliseconds: wire.releasesAtMs) : nil
        rejectedAt = state == .rejected ? Date(milliseconds: wire.rejectedAtMs) : nil
        self.granted = granted
    }
}
