import Crypto
import Foundation
import GRDB
import RallyCrypto
import RallyWire

/// A group as this home stores it: its state as a snapshot, its status and
/// its place in the log. The topic's access secret is in the secret store.
struct GroupInfoRecord: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "group_info"

    var groupID: String
    var topicID: String
    var snapshot: Data
    var status: String
    var createdAtMs: Int64
    var epochLink: Data
    var lastControlSeq: Int64
    var divergence: String?

    enum CodingKeys: String, CodingKey {
        case groupID = "group_id", topicID = "topic_id", snapshot, status, createdAtMs = "created_at_ms"
        case epochLink = "epoch_link", lastControlSeq = "last_control_seq", divergence
    }

    enum Columns {
        static let groupID = Column(CodingKeys.groupID)
        static let createdAtMs = Column(CodingKeys.createdAtMs)
        static let divergence = Column(CodingKeys.divergence)
        static let status = Column(CodingKeys.status)
    }

    static func createTable(_ db: Database) throws {
        try db.create(table: databaseTableName) { table in
            table.column("group_id", .text).primaryKey()
            table.column("topic_id", .text).notNull().unique()
            table.column("snapshot", .blob).notNull()
            table.column("status", .text).notNull()
            table.column("created_at_ms", .integer).notNull()
        }
    }

    /// v4-untrusted-relay: the epoch link, the last control entry read and
    /// a divergence the relay showed this device.
    static func addChainColumns(_ db: Database) throws {
        try db.alter(table: databaseTableName) { table in
            table.add(column: "epoch_link", .blob).notNull().defaults(to: Data())
            table.add(column: "last_control_seq", .integer).notNull().defaults(to: 0)
            table.add(column: "divergence", .text)
        }
    }

    /// `snapshot`, when given, is an encoding of `record.state` the caller
    /// has already (a welcome's, which the state was decoded from).
    init(_ record: GroupRecord, createdAt: Date, snapshot: Data? = nil) {
        groupID = record.groupID
        topicID = record.topicID
        self.snapshot = snapshot ?? FrameCodec.encode(record.state.snapshot)
        status = record.status.rawValue
        createdAtMs = ClientClock.millis(createdAt)
        epochLink = record.epochLink
        lastControlSeq = Int64(record.lastControlSeq)
        divergence = record.divergence
    }

    /// The domain record, without its access secret (read from the secret
    /// store by the caller). `states` spares decoding a snapshot it decoded
    /// before.
    func groupRecord(states: GroupStateCache) throws -> GroupRecord {
        GroupRecord(
            groupID: groupID, topicID: topicID, state: try states.state(groupID: groupID, snapshot: snapshot),
            status: GroupRecord.Status(rawValue: status) ?? .active, epochLink: epochLink,
            lastControlSeq: UInt64(max(0, lastControlSeq)), divergence: divergence)
    }

    /// Stores a group this home did not have; nothing if it has it.
    func insertUnlessStored(_ db: Database) throws {
        try db.run(
            cached: """
                INSERT OR IGNORE INTO group_info (group_id, topic_id, snapshot, status, created_at_ms, epoch_link,
                    last_control_seq, divergence)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                """,
            [groupID, topicID, snapshot, status, createdAtMs, epochLink, lastControlSeq, divergence])
    }

    /// Writes a group's new state and place in the log: one UPDATE, with
    /// no read of the old snapshot (this runs for every entry of the log).
    /// `snapshot` is `record.state.snapshot` encoded, which the caller may
    /// need as well.
    static func update(with record: GroupRecord, snapshot: Data, _ db: Database) throws {
        try db.run(
            cached: """
                UPDATE group_info SET snapshot = ?, status = ?, epoch_link = ?, last_control_seq = ?, divergence = ?
                WHERE group_id = ?
                """,
            [
                snapshot, record.status.rawValue, record.epochLink, Int64(record.lastControlSeq), record.divergence,
                record.groupID,
            ])
    }
}

/// That the secret store holds a group's key for an epoch (the key itself
/// is not in the database).
struct EpochKeyRecord: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "epoch_key"

    var groupID: String
    var epoch: Int64
    /// Empty since v4-secrets.
    var key = Data()

    enum CodingKeys: String, CodingKey { case groupID = "group_id", epoch, key }

    static func createTable(_ db: Database) throws {
        try db.create(table: databaseTableName) { table in
            table.column("group_id", .text).notNull()
            table.column("epoch", .integer).notNull()
            table.column("key", .blob).notNull()
            table.primaryKey(["group_id", "epoch"])
        }
    }

    /// v4-secrets: the keys move to the secret store.
    static func moveKeysToSecrets(_ db: Database) throws {
        for record in try fetchAll(db) {
            try SecretRecord.set(
                record.key, named: .epochKey(group: record.groupID, epoch: UInt64(max(0, record.epoch))), db: db)
        }
        try db.execute(sql: "UPDATE epoch_key SET key = x''")
    }

    static func note(epoch: UInt64, group: String, _ db: Database) throws {
        try db.run(
            cached: "INSERT OR IGNORE INTO epoch_key (group_id, epoch, key) VALUES (?, ?, x'')", [group, Int64(epoch)])
    }
}

/// What became of one of this identity's commits, as the log showed it,
/// recorded by whichever process on this home read it first.
struct OwnCommitRecord: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "own_commit"

    var commitID: Data
    var groupID: String
    var seq: Int64
    /// "applied", or why every member rejected it.
    var outcome: String
    /// The group state right after the commit.
    var snapshot: Data

    enum CodingKeys: String, CodingKey {
        case commitID = "commit_id", groupID = "group_id", seq, outcome, snapshot
    }

    static func createTable(_ db: Database) throws {
        try db.create(table: databaseTableName) { table in
            table.column("commit_id", .blob).primaryKey()
            table.column("group_id", .text).notNull()
            table.column("seq", .integer).notNull()
            table.column("outcome", .text).notNull()
            table.column("snapshot", .blob).notNull()
        }
    }
}

/// What became of one of this identity's commits.
struct OwnCommit: Sendable, Equatable {
    let groupID: String
    let seq: UInt64
    /// nil when applied; otherwise why every member rejected it.
    let rejection: String?
    /// The group state right after the commit.
    let snapshot: WireGroupSnapshot
    /// `snapshot` as stored (what a welcome carries).
    let encodedSnapshot: Data
}

extension LocalStore {
    /// Marks a group as diverged: this device was shown a history the other
    /// members do not share. The first reason stays.
    func setDivergence(_ reason: String, group: String) throws(LocalStoreError) {
        try write { db in
            guard var stored = try GroupInfoRecord.fetchOne(db, key: group), stored.divergence == nil else { return }
            stored.divergence = reason
            try stored.update(db)
        }
    }

    func ownCommit(_ commitID: Data) throws(LocalStoreError) -> OwnCommit? {
        try readStatement { db in
            try OwnCommitRecord.fetchOne(db, key: commitID).map { record in
                OwnCommit(
                    groupID: record.groupID, seq: UInt64(max(0, record.seq)),
                    rejection: record.outcome == "applied" ? nil : record.outcome,
                    snapshot: try WireGroupSnapshot(serializedBytes: record.snapshot), encodedSnapshot: record.snapshot)
            }
        }
    }

    /// The first of this identity's applied commits to a group whose state
    /// counts `requestID` as admitted: the commit that admitted it, when
    /// this identity did. Decodes every own commit of the group, so it is
    /// for the rare recovery of an admission whose answer never went out.
    func ownCommitAdmitting(
        group: String, requestID: Data
    ) throws(LocalStoreError) -> (commitID: Data, snapshot: WireGroupSnapshot)? {
        try read { db in
            let records = try OwnCommitRecord.filter(Column("group_id") == group && Column("outcome") == "applied")
                .order(Column("seq")).fetchAll(db)
            for record in records {
                let snapshot = try WireGroupSnapshot(serializedBytes: record.snapshot)
                if snapshot.admittedJoinRequests.contains(requestID) { return (record.commitID, snapshot) }
            }
            return nil
        }
    }

    func saveNewGroup(
        _ record: GroupRecord, epochKey: (UInt64, SymmetricKey)?, cursor: UInt64, now: Date
    ) throws(LocalStoreError) {
        if let (epoch, key) = epochKey { try saveEpochKey(key, epoch: epoch, group: record.groupID) }
        try saveAccessSecret(of: record)
        try write { db in
            try GroupInfoRecord(record, createdAt: now).insert(db, onConflict: .ignore)
            guard db.changesCount > 0 else { throw LocalStoreError.failed("group \(record.groupID) exists") }
            if let (epoch, _) = epochKey { try EpochKeyRecord.note(epoch: epoch, group: record.groupID, db) }
            try CursorRecord.advance(record.topic, to: cursor, db)
        }
    }

    func group(_ groupID: String) throws(LocalStoreError) -> GroupRecord? {
        let record = try readStatement { db in
            try db.fetchOne(GroupInfoRecord.self, cached: "SELECT * FROM group_info WHERE group_id = ?", [groupID])
        }
        return try record.map(decoded).map(withAccessSecret)
    }

    /// How many bytes the group's stored snapshot takes, without reading it.
    func snapshotByteCount(_ groupID: String) throws(LocalStoreError) -> Int? {
        try readStatement { db in
            try db.fetchValue(Int.self, cached: "SELECT length(snapshot) FROM group_info WHERE group_id = ?", [groupID])
        }
    }

    private func decoded(_ record: GroupInfoRecord) throws(LocalStoreError) -> GroupRecord {
        do {
            return try record.groupRecord(states: groupStates)
        } catch {
            throw .failed("\(error)")
        }
    }

    /// The topic access secret lives in the secret store, like every key.
    private func withAccessSecret(_ record: GroupRecord) throws(LocalStoreError) -> GroupRecord {
        var record = record
        record.accessSecret = try secret(.topicAccess(record.topicID))
        return record
    }

    private func saveAccessSecret(of record: GroupRecord) throws(LocalStoreError) {
        if let entry = Self.accessSecret(of: record) { try setSecrets([entry]) }
    }

    private static func accessSecret(of record: GroupRecord) -> (name: SecretName, secret: Data)? {
        record.accessSecret.map { (.topicAccess(record.topicID), $0) }
    }

    /// Finds a group by id or by an unambiguous prefix of it, or by name.
    func findGroup(_ reference: String) throws(LocalStoreError) -> [GroupRecord] {
        // By its id, the common case, without decoding every group.
        if let exact = try group(reference) { return [exact] }
        let all = try groups()
        let byPrefix = all.filter { $0.groupID.hasPrefix(reference.lowercased()) }
        if !byPrefix.isEmpty { return byPrefix }
        return all.filter { $0.state.profile.name == reference }
    }

    func groups() throws(LocalStoreError) -> [GroupRecord] {
        let records = try read { db in
            try GroupInfoRecord.order(GroupInfoRecord.Columns.createdAtMs, GroupInfoRecord.Columns.groupID)
                .fetchAll(db)
        }
        var filled: [GroupRecord] = []
        for record in records { filled.append(try withAccessSecret(decoded(record))) }
        return filled
    }

    /// The ids of the groups with `status`, oldest first, read without
    /// decoding any group's state.
    func groupIDs(status: GroupRecord.Status) throws(LocalStoreError) -> [String] {
        try read { db in
            try String.fetchAll(
                db,
                GroupInfoRecord.select(GroupInfoRecord.Columns.groupID)
                    .filter(GroupInfoRecord.Columns.status == status.rawValue)
                    .order(GroupInfoRecord.Columns.createdAtMs, GroupInfoRecord.Columns.groupID))
        }
    }

    func epochKey(group: String, epoch: UInt64) throws(LocalStoreError) -> SymmetricKey? {
        try secret(.epochKey(group: group, epoch: epoch)).map { SymmetricKey(data: $0) }
    }

    /// Stores the outcome of one group log entry atomically: the new state,
    /// a new epoch key, a message, this identity's commit outcome and the
    /// cursor. `recordChanged` false (a message, a rejected entry) leaves
    /// the stored group as it is: re-encoding and rewriting the snapshot,
    /// which grows with the members and the history, for every message
    /// was most of what reading a big group's messages cost.
    @discardableResult
    func ingestGroupEntry(
        _ record: GroupRecord, recordChanged: Bool = true, seq: UInt64, epochKey: (UInt64, SymmetricKey)?,
        message: StoredMessage?,
        inviteSeed: SymmetricKey? = nil, ownCommit: (commitID: Data, rejection: String?)? = nil,
        accessSecretChanged: Bool = false, deletingMessagesOf senders: [InboxID] = [],
        messageExpiresAt: Date? = nil, deletion: GroupLogProcessor.MessageDeletionOrder? = nil
    ) throws(LocalStoreError) -> Bool {
        try Self.checkSeq(seq)
        if accessSecretChanged { try saveAccessSecret(of: record) }
        // Secrets first: a crash in between leaves an unused key, never a
        // state that needs a key nobody stored.
        if let (epoch, key) = epochKey { try saveEpochKey(key, epoch: epoch, group: record.groupID) }
        if let inviteSeed { try saveInviteSeed(inviteSeed, group: record.groupID) }
        return try write { db in
            // Another process on this home got there first: its state is
            // at least as new as this one, which must not overwrite it.
            guard try CursorRecord.seq(of: record.topic, db) < seq else { return false }
            // Encoded once: the snapshot grows with the group's members and
            // history, and both records below keep it.
            let snapshot = recordChanged || ownCommit != nil ? FrameCodec.encode(record.state.snapshot) : Data()
            if recordChanged { try GroupInfoRecord.update(with: record, snapshot: snapshot, db) }
            if let ownCommit {
                try OwnCommitRecord(
                    commitID: ownCommit.commitID, groupID: record.groupID, seq: Int64(seq),
                    outcome: ownCommit.rejection ?? "applied", snapshot: snapshot
                ).insert(db, onConflict: .ignore)
            }
            if let (epoch, _) = epochKey { try EpochKeyRecord.note(epoch: epoch, group: record.groupID, db) }
            if inviteSeed != nil { try InviteSeedRecord.note(group: record.groupID, db) }
            let inserted = try message.map { try MessageRecord.insert($0.namedByMemberRecord(in: record.state), db) }
            if let message, let messageExpiresAt {
                try db.execute(
                    sql: "INSERT OR IGNORE INTO message_expiry (id, expires_at_ms) VALUES (?, ?)",
                    arguments: [message.id, ClientClock.millis(messageExpiresAt)])
            }
            if let deletion {
                // Only its author's, or any with a moderator's; fully or
                // marked, as the preference said at the deletion's place.
                let sql =
                    deletion.full
                    ? "DELETE FROM message WHERE id = ? AND conversation = ? AND (sender = ? OR ?)"
                    : "UPDATE message SET display_text = '\(GroupService.deletedText)' WHERE id = ? AND conversation = ? AND (sender = ? OR ?)"
                try db.execute(
                    sql: sql,
                    arguments: [deletion.messageID, record.groupID, deletion.sender.rawValue, deletion.moderates])
            }
            // A deletion drops every message with the commit that says so
            // (the keys follow in markGroupDeleted).
            if record.status == .deleted {
                _ = try MessageRecord.filter(MessageRecord.Columns.conversation == record.groupID).deleteAll(db)
            }
            // A removal "with messages": every member deletes them, in the
            // same transaction as the commit that says so.
            for sender in senders {
                try db.execute(
                    sql: "DELETE FROM message WHERE conversation = ? AND sender = ?",
                    arguments: [record.groupID, sender.rawValue])
            }
            try CursorRecord.advance(record.topic, to: seq, db)
            return inserted ?? false
        }
    }

    /// Stores a welcome's group, its key and group cursor, the welcome
    /// message and the inbox cursor, in one transaction.
    @discardableResult
    func ingestWelcome(
        _ record: GroupRecord, snapshot: Data? = nil, epochKey: (UInt64, SymmetricKey), groupCursor: UInt64,
        inboxTopic: TopicName,
        inboxSeq: UInt64, message: StoredMessage, inviteSeed: SymmetricKey? = nil,
        joinEvent: JoinEventForStore? = nil, history: [StoredMessage] = [], now: Date
    ) throws(LocalStoreError) -> Bool {
        try Self.checkSeq(groupCursor)
        try Self.checkSeq(inboxSeq)
        // Both keys, the records and the inbox cursor in one write (where
        // the keys live in this database): lost to a power loss, the
        // welcome is read again from the inbox.
        let epochSecret = Self.epochKeySecret(epochKey.1, epoch: epochKey.0, group: record.groupID)
        if let inviteSeed { try saveInviteSeed(inviteSeed, group: record.groupID) }
        let stored = try write(storingReceived: [epochSecret] + (Self.accessSecret(of: record).map { [$0] } ?? [])) {
            db in
            // Another process on this home took this welcome already.
            guard try CursorRecord.seq(of: inboxTopic, db) < inboxSeq else { return false }
            try GroupInfoRecord(record, createdAt: now, snapshot: snapshot).insertUnlessStored(db)
            try EpochKeyRecord.note(epoch: epochKey.0, group: record.groupID, db)
            if inviteSeed != nil { try InviteSeedRecord.note(group: record.groupID, db) }
            try CursorRecord.advance(record.topic, to: groupCursor, db)
            let inserted = try MessageRecord.insert(message, db)
            for shared in history { _ = try MessageRecord.insert(shared, db) }
            if let joinEvent { try JoinAttemptRecord.apply(joinEvent, at: now, db) }
            try CursorRecord.advance(inboxTopic, to: inboxSeq, db)
            return inserted
        }
        // The state was decoded from these very bytes (the group's first
        // read, to show it, need not decode them again). Remembered even
        // when another process stored the group first: a cached state is
        // used only while the stored bytes are identical to these.
        if let snapshot { groupStates.remember(record.state, groupID: record.groupID, decodedFrom: snapshot) }
        return stored
    }

    /// The owner deleted the group: its messages and keys go; the record
    /// stays, marked deleted, so the user is told what happened and an
    /// admin's client answers later join requests `conversation_not_found`.
    func markGroupDeleted(_ groupID: String) throws(LocalStoreError) {
        let epochs = try write { db in
            guard var stored = try GroupInfoRecord.fetchOne(db, key: groupID) else { return [Int64]() }
            stored.status = GroupRecord.Status.deleted.rawValue
            try stored.update(db)
            let epochs = try EpochKeyRecord.filter(Column("group_id") == groupID).fetchAll(db).map(\.epoch)
            _ = try EpochKeyRecord.filter(Column("group_id") == groupID).deleteAll(db)
            _ = try MessageRecord.filter(MessageRecord.Columns.conversation == groupID).deleteAll(db)
            return epochs
        }
        for epoch in epochs { try removeSecret(.epochKey(group: groupID, epoch: UInt64(max(0, epoch)))) }
    }

    /// Deletes the timed messages whose time is up (every member's client
    /// does, each by its own clock). Returns how many went.
    @discardableResult
    func deleteExpiredMessages(now: Date) throws(LocalStoreError) -> Int {
        try write { db in
            let cutoff = ClientClock.millis(now)
            try db.execute(
                sql: "DELETE FROM message WHERE id IN (SELECT id FROM message_expiry WHERE expires_at_ms <= ?)",
                arguments: [cutoff])
            let deleted = db.changesCount
            try db.execute(sql: "DELETE FROM message_expiry WHERE expires_at_ms <= ?", arguments: [cutoff])
            return deleted
        }
    }

    /// Removes a group from this device (its state, keys and messages). The
    /// invite seed stays, so requests still arriving for it are answered
    /// `conversation_not_found` instead of never.
    func forgetGroup(_ groupID: String) throws(LocalStoreError) {
        let epochs = try write { db in
            let epochs = try EpochKeyRecord.filter(Column("group_id") == groupID).fetchAll(db).map(\.epoch)
            _ = try GroupInfoRecord.deleteOne(db, key: groupID)
            _ = try EpochKeyRecord.filter(Column("group_id") == groupID).deleteAll(db)
            _ = try MessageRecord.filter(MessageRecord.Columns.conversation == groupID).deleteAll(db)
            return epochs
        }
        // Keys after the records: a crash in between leaves unused keys.
        for epoch in epochs { try removeSecret(.epochKey(group: groupID, epoch: UInt64(max(0, epoch)))) }
    }

    func saveEpochKey(_ key: SymmetricKey, epoch: UInt64, group: String) throws(LocalStoreError) {
        try setSecrets([Self.epochKeySecret(key, epoch: epoch, group: group)])
    }

    private static func epochKeySecret(
        _ key: SymmetricKey, epoch: UInt64, group: String
    ) -> (name: SecretName, secret: Data) {
        (.epochKey(group: group, epoch: epoch), key.withUnsafeBytes { Data($0) })
    }
}

extension StoredMessage {
    /// A group message under the name of its sender's member record in
    /// `state` (the group at the message's position in the log), which the
    /// group's admins signed, rather than the name inside the message.
    func namedByMemberRecord(in state: GroupState) -> StoredMessage {
        guard let member = state.members[sender], member.identity.displayName != senderName else { return self }
        return withSenderName(member.identity.displayName)
    }
}
