import Crypto
import Foundation
import GRDB
import RallyCrypto
import RallyWire

/// Vaults (ADR 0014): create one, add, list, fetch and remove documents.
/// The log on the relay is the truth; this home's tables are rebuilt from
/// it, so two processes of one home (or an app and its extension) see the
/// same vault after a sync.
struct VaultService: Sendable {
    /// How often an owner's entry is rebuilt after losing a race with
    /// another process of the same home.
    static let publishAttempts = 8

    let context: ClientContext

    // MARK: Vaults

    func create(name rawName: String) async throws(RallyClientError) -> VaultSummary {
        let name = try vaultError { () throws(VaultClientError) in try VaultEntries.validName(rawName) }
        let key = VaultSealing.newVaultKey()
        let access = try crypto { () throws(RallyCryptoError) in
            try TopicAccess(secret: TopicAccess.secret(fromEpochKey: key))
        }
        let record = VaultRecord(
            id: access.foundedTopicID, name: name, ownerInbox: context.identity.inboxID.rawValue,
            ownerSigningKey: context.identity.signingKey.publicKey.rawRepresentation, isOwner: true, epoch: 0,
            epochStartSeq: 1, createdAtMs: ClientClock.millis(context.clock.now()))
        try context.stored { () throws(LocalStoreError) in
            try context.store.setSecret(key.withUnsafeBytes { Data($0) }, .vaultKey(vault: record.id, epoch: 0))
            try context.store.write { db in try record.insert(db) }
        }
        do {
            var created = WireVaultCreated()
            created.name = name
            try await publish(record.id) { _, _ throws(RallyClientError) in .created(created) }
        } catch {
            // Nothing reached the relay: the vault does not exist.
            _ = try? context.store.write { db in try VaultRecord.deleteOne(db, key: record.id) }
            try? context.store.removeSecret(.vaultKey(vault: record.id, epoch: 0))
            throw error
        }
        return try summary(record.id)
    }

    func list() throws(RallyClientError) -> [VaultSummary] {
        try context.stored { () throws(LocalStoreError) in try context.store.vaults() }
    }

    /// The vault whose id or name is `text`.
    func resolve(_ text: String) throws(RallyClientError) -> VaultRecord {
        let found = try context.stored { () throws(LocalStoreError) in try context.store.vaults(matching: text) }
        if let byID = found.first(where: { $0.id == text }) { return byID }
        switch found.count {
        case 0:
            let revoked = try context.stored { () throws(LocalStoreError) in
                try context.store.read { db in
                    try VaultInvitationRecord.filter(
                        (Column("vault_id") == text || Column("vault_name") == text)
                            && Column("status") == NomineeStatus.revoked.rawValue
                    ).fetchOne(db)
                }
            }
            if let revoked { throw .vault(.accessRevoked(vault: revoked.vaultName)) }
            throw .vault(.unknownVault(text))
        case 1: return found[0]
        default: throw .vault(.ambiguousVault(text, ids: found.map(\.id)))
        }
    }

    // MARK: Documents

    /// Seals `file`, uploads it and records it in the vault's log.
    func add(
        _ vaultText: String, file: URL, name rawName: String? = nil,
        progress: @escaping @Sendable (TransferProgress) -> Void = { _ in }
    ) async throws(RallyClientError) -> VaultDocumentSummary {
        let vault = try resolve(vaultText)
        guard vault.isOwner else { throw .vault(.notOwner(vault: vault.name)) }
        let name = try vaultError { () throws(VaultClientError) in
            try VaultEntries.validName(rawName ?? file.lastPathComponent)
        }
        let documentKey = DocumentCipher.newKey()
        let documentID = Randomness.bytes(16).hexString
        let blobID = Randomness.bytes(32).hexString
        let uploaded = try await withBlobs { transfer throws(RallyClientError) in
            try await transfer.upload(file: file, key: documentKey, blobID: blobID, progress: progress)
        }
        let addedAt = ClientClock.millis(context.clock.now())
        try await publish(vault.id) { record, vaultKey throws(RallyClientError) in
            let wrapped = try crypto { () throws(RallyCryptoError) in
                try VaultSealing.wrap(
                    documentKey: documentKey, vaultKey: vaultKey, vaultID: record.id, documentID: documentID,
                    epoch: UInt64(record.epoch))
            }
            return .documentAdded(
                VaultEntries.document(
                    id: documentID, name: name, uploaded: uploaded, blobID: blobID, wrappedKey: wrapped, at: addedAt))
        }
        return VaultDocumentSummary(
            id: documentID, name: name, size: uploaded.plaintextSize,
            addedAt: Date(milliseconds: addedAt))
    }

    /// The vault's documents, after reading its log.
    func documents(_ vaultText: String) async throws(RallyClientError) -> [VaultDocumentSummary] {
        let vault = try resolve(vaultText)
        try await sync(vault.id)
        return try context.stored { () throws(LocalStoreError) in try context.store.vaultDocuments(vault.id) }
            .map(\.summary)
    }

    /// Downloads, opens and checks a document, then writes it to `output`.
    func get(
        _ vaultText: String, document documentText: String, to output: URL,
        progress: @escaping @Sendable (TransferProgress) -> Void = { _ in }
    ) async throws(RallyClientError) -> VaultDocumentSummary {
        let vault = try resolve(vaultText)
        try await sync(vault.id)
        let document = try resolveDocument(documentText, in: vault)
        let vaultKey = try key(vault.id, epoch: document.epoch)
        let documentKey = try crypto { () throws(RallyCryptoError) in
            try VaultSealing.unwrap(
                document.wrappedKey, vaultKey: vaultKey, vaultID: vault.id, documentID: document.documentID,
                epoch: UInt64(document.epoch))
        }
        try await withBlobs { transfer throws(RallyClientError) in
            try await transfer.download(
                blobID: document.blobID, key: documentKey, plaintextSize: document.size,
                sealedSize: document.sealedSize, sealedSHA256: document.sealedSHA256, to: output, progress: progress)
        }
        return document.summary
    }

    /// Removes a document from the vault's log, then its blob from the
    /// relay.
    func remove(
        _ vaultText: String, document documentText: String
    ) async throws(RallyClientError)
        -> VaultDocumentSummary
    {
        let vault = try resolve(vaultText)
        guard vault.isOwner else { throw .vault(.notOwner(vault: vault.name)) }
        try await sync(vault.id)
        let document = try resolveDocument(documentText, in: vault)
        var removed = WireVaultDocumentRemoved()
        removed.documentID = document.documentID
        try await publish(vault.id) { _, _ throws(RallyClientError) in .documentRemoved(removed) }
        // The log no longer names it; a blob left behind (the relay was
        // unreachable) only counts against the owner's quota.
        _ = try? await withBlobs { transfer throws(RallyClientError) -> Void in
            do throws(RelayClientError) {
                try await transfer.blobs.delete(document.blobID)
            } catch {
                throw .relay(error)
            }
        }
        return document.summary
    }

    /// Documents one snapshot part carries, so a part fits an envelope
    /// whatever the names (at most 255 bytes each).
    static let documentsPerSnapshotPart = 200

    /// Moves the vault to a new key (after a nominee lost access): the
    /// first entry of the new epoch replaces the topic's access key, and
    /// the new epoch's snapshot lists every document with its key rewrapped
    /// under the new vault key. Whoever holds only the old key can read
    /// the log up to the rotation and open none of what follows.
    /// - Returns: the new epoch.
    @discardableResult
    func rotate(_ vaultID: String) async throws(RallyClientError) -> Int64 {
        try await sync(vaultID)
        let vault = try resolve(vaultID)
        guard vault.isOwner else { throw .vault(.notOwner(vault: vault.name)) }
        let epoch = vault.epoch + 1
        let newKey = VaultSealing.newVaultKey()
        let newAccess = try crypto { () throws(RallyCryptoError) in
            try TopicAccess(secret: TopicAccess.secret(fromEpochKey: newKey))
        }
        try context.stored { () throws(LocalStoreError) in
            try context.store.setSecret(
                newKey.withUnsafeBytes { Data($0) }, .vaultKey(vault: vaultID, epoch: UInt64(epoch)))
        }
        let documents = try context.stored { () throws(LocalStoreError) in try context.store.vaultDocuments(vaultID) }
        var rewrapped: [WireVaultDocument] = []
        for document in documents {
            let oldKey = try key(vaultID, epoch: document.epoch)
            let wrapped = try crypto { () throws(RallyCryptoError) in
                let documentKey = try VaultSealing.unwrap(
                    document.wrappedKey, vaultKey: oldKey, vaultID: vaultID, documentID: document.documentID,
                    epoch: UInt64(document.epoch))
                return try VaultSealing.wrap(
                    documentKey: documentKey, vaultKey: newKey, vaultID: vaultID, documentID: document.documentID,
                    epoch: UInt64(epoch))
            }
            rewrapped.append(document.wire(wrappedKey: wrapped))
        }
        let parts = stride(from: 0, to: max(rewrapped.count, 1), by: Self.documentsPerSnapshotPart).map {
            Array(rewrapped[$0..<min($0 + Self.documentsPerSnapshotPart, rewrapped.count)])
        }
        for (index, part) in parts.enumerated() {
            var snapshot = WireVaultSnapshot()
            snapshot.name = vault.name
            snapshot.documents = part
            snapshot.part = UInt32(index)
            snapshot.parts = UInt32(parts.count)
            try await publish(vaultID, rotatingTo: index == 0 ? (epoch, newAccess) : nil) {
                _, _ throws(RallyClientError) in .snapshot(snapshot)
            }
        }
        return epoch
    }

    /// The key and first seq of the vault's current epoch: what a grant to
    /// a nominee carries.
    func currentGrant(_ vaultID: String) throws(RallyClientError) -> WireVaultKeyGrant {
        let vault = try resolve(vaultID)
        let key = try key(vaultID, epoch: vault.epoch)
        var grant = WireVaultKeyGrant()
        grant.vaultID = vault.id
        grant.vaultName = vault.name
        grant.epoch = UInt64(vault.epoch)
        grant.vaultKey = key.withUnsafeBytes { Data($0) }
        grant.startSeq = UInt64(vault.epochStartSeq)
        return grant
    }

    private func resolveDocument(_ text: String, in vault: VaultRecord) throws(RallyClientError) -> VaultDocumentRecord
    {
        let documents = try context.stored { () throws(LocalStoreError) in
            try context.store.vaultDocuments(vault.id)
        }
        if let byID = documents.first(where: { $0.documentID == text }) { return byID }
        let named = documents.filter { $0.name == text }
        switch named.count {
        case 0: throw .vault(.unknownDocument(vault: vault.name, document: text))
        case 1: return named[0]
        default: throw .vault(.ambiguousDocument(text, ids: named.map(\.documentID)))
        }
    }

    // MARK: The log

    /// Reads the vault's log from this home's cursor to the relay's head.
    func sync(_ vaultID: String) async throws(RallyClientError) {
        guard let vault = try context.stored({ () throws(LocalStoreError) in try context.store.vault(id: vaultID) })
        else { throw .vault(.unknownVault(vaultID)) }
        let service = self
        try await context.followTopic(
            vault.topic, untilCaughtUp: true,
            access: { () throws(RallyClientError) in try service.access(vaultID) },
            process: { envelope throws(RallyClientError) in try service.apply(envelope, vaultID: vaultID) })
    }

    /// Builds the owner's next entry on top of everything the relay holds
    /// and publishes it as the topic's next control entry; a race lost to
    /// another process of this home is rebuilt after reading its entry.
    /// With `rotatingTo`, the entry starts epoch `rotatingTo.epoch`: it is
    /// sealed with that epoch's key and replaces the topic's access key.
    private func publish(
        _ vaultID: String, rotatingTo rotation: (epoch: Int64, access: TopicAccess)? = nil,
        _ body: (VaultRecord, SymmetricKey) throws(RallyClientError) -> WireVaultEntry.OneOf_Body
    ) async throws(RallyClientError) {
        var lastConflict = RelayClientError.conflict(topic: "", lastControlSeq: 0)
        // The last control entry: the cursor, unless someone holding the
        // topic's key (a nominee) wrote plain entries after it, which the
        // relay's CONFLICT then names.
        var lastControlSeq: UInt64?
        for _ in 1...Self.publishAttempts {
            try await sync(vaultID)
            guard let vault = try context.stored({ () throws(LocalStoreError) in try context.store.vault(id: vaultID) })
            else { throw .vault(.unknownVault(vaultID)) }
            let epoch = rotation?.epoch ?? vault.epoch
            let vaultKey = try key(vaultID, epoch: epoch)
            var entry = WireVaultEntry()
            entry.vaultID = vaultID
            entry.epoch = UInt64(epoch)
            entry.createdAtMs = ClientClock.millis(context.clock.now())
            entry.body = try body(vault, vaultKey)
            let payload = try crypto { () throws(RallyCryptoError) in
                try VaultEntries.seal(entry, owner: context.identity, vaultKey: vaultKey)
            }
            let access = try self.access(vaultID)
            let cursor = try context.stored { () throws(LocalStoreError) in try context.store.cursor(for: vault.topic) }
            let expected = lastControlSeq ?? cursor
            let idempotencyKey = Randomness.bytes(16)
            do {
                let ack = try await context.withRetries("publishing a vault entry") { link throws(RelayClientError) in
                    try await link.publish(
                        topic: vault.topic, payload: payload, idempotencyKey: idempotencyKey, shouldPush: false,
                        expiresAt: nil, access: access, control: true, expectedControlSeq: expected,
                        rotateAccessKey: rotation?.access.publicKey)
                }
                // Applied here rather than read back: anything the relay
                // put between the cursor and this entry is not a control
                // entry, so not the owner's, and would be skipped anyway.
                var stored = WireEnvelope()
                stored.topic = vault.topic.rawValue
                stored.seq = ack.seq
                stored.payload = payload
                stored.control = true
                try apply(stored, vaultID: vaultID)
                return
            } catch .relay(.conflict(let topic, let seq)) {
                lastConflict = .conflict(topic: topic, lastControlSeq: seq)
                lastControlSeq = seq
            }
        }
        throw .relay(lastConflict)
    }

    /// Applies one entry of the log, exactly once per home.
    private func apply(_ envelope: WireEnvelope, vaultID: String) throws(RallyClientError) {
        guard let vault = try context.stored({ () throws(LocalStoreError) in try context.store.vault(id: vaultID) })
        else { return }
        var entry: WireVaultEntry?
        // Only the owner writes, always as control entries: a plain entry
        // (a nominee holds the topic's key too) is skipped unread.
        if envelope.control, let sealed = try? VaultEntries.sealed(envelope.payload) {
            let epoch = sealed.epoch
            if let key = try? key(vaultID, epoch: Int64(clamping: epoch)) {
                do {
                    entry = try VaultEntries.open(
                        sealed, vaultID: vaultID, vaultKey: key, ownerSigningKey: vault.ownerSigningKey)
                } catch {
                    context.logger.warning("vault \(vaultID) seq \(envelope.seq): \(error)")
                }
            } else if Int64(clamping: epoch) > vault.epoch {
                // The owner rotated the key and this home's grant has not
                // arrived: stop here, so the entry is read once it has.
                throw .vault(.awaitingKey(vault: vault.name))
            }
            // Otherwise an entry of an epoch before this home's access:
            // skipped.
        }
        let topic = vault.topic
        try context.stored { () throws(LocalStoreError) in
            try context.store.write { db in
                guard try CursorRecord.seq(of: topic, db) < envelope.seq else { return }
                if let entry { try Self.apply(entry, seq: envelope.seq, vaultID: vaultID, db) }
                try CursorRecord.advance(topic, to: envelope.seq, db)
            }
        }
    }

    private static func apply(_ entry: WireVaultEntry, seq: UInt64, vaultID: String, _ db: Database) throws {
        switch entry.body {
        case .created(let created):
            if let name = try? VaultEntries.validName(created.name) {
                try db.execute(sql: "UPDATE vault SET name = ? WHERE id = ?", arguments: [name, vaultID])
            }
            if entry.epoch == 0 {
                try db.execute(
                    sql: "UPDATE vault SET epoch_start_seq = ? WHERE id = ? AND epoch = 0",
                    arguments: [Int64(seq), vaultID])
            }
        case .documentAdded(let document):
            guard (try? VaultEntries.check(document)) != nil else { return }
            try VaultDocumentRecord(vaultID: vaultID, epoch: entry.epoch, document).save(db)
        case .documentRemoved(let removed):
            try db.execute(
                sql: "DELETE FROM vault_document WHERE vault_id = ? AND document_id = ?",
                arguments: [vaultID, removed.documentID])
        case .snapshot(let snapshot):
            // A new epoch lists every document again, keys rewrapped.
            if snapshot.part == 0 {
                // A new epoch starts here: this home reads and writes with
                // its key from now on.
                try db.execute(
                    sql: "UPDATE vault SET epoch = ?, epoch_start_seq = ? WHERE id = ? AND epoch <= ?",
                    arguments: [Int64(entry.epoch), Int64(seq), vaultID, Int64(entry.epoch)])
                try db.execute(sql: "DELETE FROM vault_document WHERE vault_id = ?", arguments: [vaultID])
                if let name = try? VaultEntries.validName(snapshot.name) {
                    try db.execute(sql: "UPDATE vault SET name = ? WHERE id = ?", arguments: [name, vaultID])
                }
            }
            for document in snapshot.documents where (try? VaultEntries.check(document)) != nil {
                try VaultDocumentRecord(vaultID: vaultID, epoch: entry.epoch, document).save(db)
            }
        case nil:
            return
        }
    }

    // MARK: Keys and links

    func key(_ vaultID: String, epoch: Int64) throws(RallyClientError) -> SymmetricKey {
        let raw = try context.stored { () throws(LocalStoreError) in
            try context.store.secret(.vaultKey(vault: vaultID, epoch: UInt64(clamping: epoch)))
        }
        guard let raw, raw.count == 32 else {
            throw .vault(.invalidEntry("this home has no key for epoch \(epoch) of vault \(vaultID)"))
        }
        return SymmetricKey(data: raw)
    }

    private func access(_ vaultID: String) throws(RallyClientError) -> TopicAccess {
        guard let vault = try context.stored({ () throws(LocalStoreError) in try context.store.vault(id: vaultID) })
        else { throw .vault(.unknownVault(vaultID)) }
        let vaultKey = try key(vaultID, epoch: vault.epoch)
        return try crypto { () throws(RallyCryptoError) in
            try TopicAccess(secret: TopicAccess.secret(fromEpochKey: vaultKey))
        }
    }

    /// Runs a transfer over an HTTP link of its own.
    private func withBlobs<T>(
        _ operation: (DocumentTransfer) async throws(RallyClientError) -> T
    ) async throws(RallyClientError) -> T {
        try await HTTPRelayLink.using(context.relayURL, identity: context.identity) {
            link throws(RallyClientError) in
            try await operation(
                DocumentTransfer(blobs: BlobClient(link: link), clock: context.clock, backoff: context.backoff))
        }
    }

    private func summary(_ vaultID: String) throws(RallyClientError) -> VaultSummary {
        guard let summary = try list().first(where: { $0.id == vaultID }) else {
            throw .vault(.unknownVault(vaultID))
        }
        return summary
    }
}

private func vaultError<T>(_ body: () throws(VaultClientError) -> T) throws(RallyClientError) -> T {
    do {
        return try body()
    } catch {
        throw .vault(error)
    }
}

private func crypto<T>(_ body: () throws(RallyCryptoError) -> T) throws(RallyClientError) -> T {
    do {
        return try body()
    } catch {
        throw .vault(.invalidEntry("\(error)"))
    }
}
