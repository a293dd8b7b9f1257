import Crypto
import Foundation
import GRDB
import RallyCrypto
import RallyWire

/// A group as this client knows it.
public struct GroupRecord: Sendable, Equatable {
    public enum Status: String, Sendable, Codable {
        /// Created locally; the create commit is not applied yet.
        case creating
        case active
        case removed
        case left
    }

    public let groupID: String
    public let topicID: String
    public var state: GroupState
    public var status: Status
    /// The topic's current access secret (ADR 0008); nil only for records
    /// made before topics needed one.
    public var accessSecret: Data?
    /// The epoch link of the current epoch, which entries this member
    /// publishes carry.
    public var epochLink = Data()
    /// The seq of the last control entry of the log this member read: the
    /// relay stores a commit only if it builds on it.
    public var lastControlSeq: UInt64 = 0
    /// Set when this device was shown a history the other members do not
    /// share; nothing is sent into the group from then on.
    public var divergence: String?

    public init(
        groupID: String, topicID: String, state: GroupState, status: Status, accessSecret: Data? = nil,
        epochLink: Data = Data(), lastControlSeq: UInt64 = 0, divergence: String? = nil
    ) {
        self.groupID = groupID
        self.topicID = topicID
        self.state = state
        self.status = status
        self.accessSecret = accessSecret
        self.epochLink = epochLink
        self.lastControlSeq = lastControlSeq
        self.divergence = divergence
    }

    /// A group's id names its topic: first 16 bytes of SHA-256 over
    /// "rally-group-id-v1" and the topic id, in hex. A welcome that pairs a
    /// group id with another topic is refused.
    public static func groupID(forTopicID topicID: String) -> String {
        Data(SHA256.hash(data: Data("rally-group-id-v1|\(topicID)".utf8)).prefix(16)).hexString
    }

    public var topicAccess: TopicAccess? {
        accessSecret.flatMap { try? TopicAccess(secret: SymmetricKey(data: $0)) }
    }

    public var topic: TopicName {
        // Topic ids are 64 lowercase hex digits, always a valid topic id.
        try! TopicName.group(topicID)
    }
}

extension LocalStore {
    static func registerGroupMigrations(_ migrator: inout DatabaseMigrator) {
        migrator.registerMigration("v2-groups") { db in
            try db.create(table: "group_info") { table in
                table.column("group_id", .text).primaryKey()
                table.column("topic_id", .text).notNull().unique()
                table.column("snapshot", .blob).notNull()
                table.column("status", .text).notNull()
                table.column("created_at_ms", .integer).notNull()
            }
            try db.create(table: "epoch_key") { table in
                table.column("group_id", .text).notNull()
                table.column("epoch", .integer).notNull()
                table.column("key", .blob).notNull()
                table.primaryKey(["group_id", "epoch"])
            }
        }
        migrator.registerMigration("v4-untrusted-relay") { db in
            try db.alter(table: "group_info") { table in
                table.add(column: "epoch_link", .blob).notNull().defaults(to: Data())
                table.add(column: "last_control_seq", .integer).notNull().defaults(to: 0)
                table.add(column: "divergence", .text)
            }
            // Every process on this home records what became of this
            // identity's commits, whichever process read them first.
            try db.create(table: "own_commit") { table in
                table.column("commit_id", .blob).primaryKey()
                table.column("group_id", .text).notNull()
                table.column("seq", .integer).notNull()
                table.column("outcome", .text).notNull()
                table.column("snapshot", .blob).notNull()
            }
        }
    }

    /// Marks a group as diverged: this device was shown a history the other
    /// members do not share. The first reason stays.
    public func setDivergence(_ reason: String, group: String) throws(LocalStoreError) {
        try write { db in
            try db.execute(
                sql: "UPDATE group_info SET divergence = COALESCE(divergence, ?) WHERE group_id = ?",
                arguments: [reason, group])
        }
    }

    /// What became of one of this identity's commits, as the log showed it.
    public struct OwnCommit: Sendable, Equatable {
        public let groupID: String
        public let seq: UInt64
        /// nil when applied; otherwise why every member rejected it.
        public let rejection: String?
        /// The group state right after the commit.
        public let snapshot: WireGroupSnapshot
    }

    public func ownCommit(_ commitID: Data) throws(LocalStoreError) -> OwnCommit? {
        try read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM own_commit WHERE commit_id = ?", arguments: [commitID]).map {
                row in
                let outcome: String = row["outcome"]
                return OwnCommit(
                    groupID: row["group_id"], seq: UInt64(row["seq"] as Int64),
                    rejection: outcome == "applied" ? nil : outcome,
                    snapshot: try WireGroupSnapshot(serializedBytes: row["snapshot"] as Data))
            }
        }
    }

    public func saveNewGroup(
        _ record: GroupRecord, epochKey: (UInt64, SymmetricKey)?, cursor: UInt64
    )
        throws(LocalStoreError)
    {
        if let (epoch, key) = epochKey { try saveEpochKey(key, epoch: epoch, group: record.groupID) }
        try saveAccessSecret(of: record)
        try write { db in
            try db.execute(
                sql: """
                    INSERT INTO group_info (group_id, topic_id, snapshot, status, created_at_ms,
                        epoch_link, last_control_seq, divergence)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT(group_id) DO NOTHING
                    """,
                arguments: Self.insertArguments(record))
            guard db.changesCount > 0 else { throw LocalStoreError.failed("group \(record.groupID) exists") }
            if let (epoch, _) = epochKey { try Self.recordKey(epoch: epoch, group: record.groupID, db: db) }
            try Self.setCursor(record.topic, seq: cursor, db: db)
        }
    }

    public func group(_ groupID: String) throws(LocalStoreError) -> GroupRecord? {
        let record = try read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM group_info WHERE group_id = ?", arguments: [groupID])
                .map(Self.groupRecord(row:))
        }
        return try record.map(withAccessSecret)
    }

    /// The topic access secret lives in the secret store, like every key.
    private func withAccessSecret(_ record: GroupRecord) throws(LocalStoreError) -> GroupRecord {
        var record = record
        record.accessSecret = try secret(.topicAccess(record.topicID))
        return record
    }

    private func saveAccessSecret(of record: GroupRecord) throws(LocalStoreError) {
        if let secret = record.accessSecret { try setSecret(secret, .topicAccess(record.topicID)) }
    }

    /// Finds a group by id or by an unambiguous prefix of it, or by name.
    public func findGroup(_ reference: String) throws(LocalStoreError) -> [GroupRecord] {
        let all = try groups()
        if let exact = all.first(where: { $0.groupID == reference }) { return [exact] }
        let byPrefix = all.filter { $0.groupID.hasPrefix(reference.lowercased()) }
        if !byPrefix.isEmpty { return byPrefix }
        return all.filter { $0.state.profile.name == reference }
    }

    public func groups() throws(LocalStoreError) -> [GroupRecord] {
        let records = try read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM group_info ORDER BY created_at_ms, group_id")
                .map(Self.groupRecord(row:))
        }
        var filled: [GroupRecord] = []
        for record in records { filled.append(try withAccessSecret(record)) }
        return filled
    }

    public func epochKey(group: String, epoch: UInt64) throws(LocalStoreError) -> SymmetricKey? {
        try secret(.epochKey(group: group, epoch: epoch)).map { SymmetricKey(data: $0) }
    }

    /// Whether this group's persisted state has applied the commit: what
    /// several processes on one home agree on, whichever of them read the
    /// commit from the log first.
    public func hasApplied(commitID: Data, group groupID: String) throws(LocalStoreError) -> Bool {
        try group(groupID)?.state.appliedCommitIDs.contains(commitID) ?? false
    }

    /// Stores the outcome of one group log entry atomically: the new state,
    /// a new epoch key, a message, and the cursor.
    @discardableResult
    public func ingestGroupEntry(
        _ record: GroupRecord, seq: UInt64, epochKey: (UInt64, SymmetricKey)?, message: StoredMessage?,
        inviteSeed: SymmetricKey? = nil, ownCommit: (commitID: Data, rejection: String?)? = nil,
        accessSecretChanged: Bool = false
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
            guard try Self.cursor(record.topic, db: db) < seq else { return false }
            try db.execute(
                sql: """
                    UPDATE group_info SET snapshot = ?, status = ?, epoch_link = ?,
                        last_control_seq = ?, divergence = ? WHERE group_id = ?
                    """,
                arguments: [
                    FrameCodec.encode(record.state.snapshot), record.status.rawValue,
                    record.epochLink, Int64(record.lastControlSeq), record.divergence, record.groupID,
                ])
            if let ownCommit {
                try db.execute(
                    sql: """
                        INSERT OR IGNORE INTO own_commit (commit_id, group_id, seq, outcome, snapshot)
                        VALUES (?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        ownCommit.commitID, record.groupID, Int64(seq), ownCommit.rejection ?? "applied",
                        FrameCodec.encode(record.state.snapshot),
                    ])
            }
            if let (epoch, _) = epochKey { try Self.recordKey(epoch: epoch, group: record.groupID, db: db) }
            if inviteSeed != nil { try Self.recordInviteSeed(group: record.groupID, db: db) }
            var inserted = false
            if let message {
                inserted = try Self.insert(Self.namedByMemberRecord(message, in: record.state), db: db)
            }
            try Self.setCursor(record.topic, seq: seq, db: db)
            return inserted
        }
    }

    /// Stores a welcome's group, its key and group cursor, the welcome
    /// message and the inbox cursor, in one transaction.
    @discardableResult
    public func ingestWelcome(
        _ record: GroupRecord, epochKey: (UInt64, SymmetricKey), groupCursor: UInt64, inboxTopic: TopicName,
        inboxSeq: UInt64, message: StoredMessage, inviteSeed: SymmetricKey? = nil,
        joinEvent: JoinEventForStore? = nil
    ) throws(LocalStoreError) -> Bool {
        try Self.checkSeq(groupCursor)
        try Self.checkSeq(inboxSeq)
        try saveEpochKey(epochKey.1, epoch: epochKey.0, group: record.groupID)
        try saveAccessSecret(of: record)
        if let inviteSeed { try saveInviteSeed(inviteSeed, group: record.groupID) }
        return try write { db in
            // Another process on this home took this welcome already.
            guard try Self.cursor(inboxTopic, db: db) < inboxSeq else { return false }
            try db.execute(
                sql: """
                    INSERT INTO group_info (group_id, topic_id, snapshot, status, created_at_ms,
                        epoch_link, last_control_seq, divergence)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(group_id) DO NOTHING
                    """,
                arguments: Self.insertArguments(record))
            try Self.recordKey(epoch: epochKey.0, group: record.groupID, db: db)
            if inviteSeed != nil { try Self.recordInviteSeed(group: record.groupID, db: db) }
            try Self.setCursor(record.topic, seq: groupCursor, db: db)
            let inserted = try Self.insert(message, db: db)
            if let joinEvent { try Self.applyJoinEvent(joinEvent, db: db) }
            try Self.setCursor(inboxTopic, seq: inboxSeq, db: db)
            return inserted
        }
    }

    private static func insertArguments(_ record: GroupRecord) -> StatementArguments {
        [
            record.groupID, record.topicID, FrameCodec.encode(record.state.snapshot), record.status.rawValue,
            Self.millis(Date()), record.epochLink, Int64(record.lastControlSeq),
            record.divergence,
        ]
    }

    /// A group message under the name of its sender's member record in
    /// `state` (the group at the message's position in the log), which the
    /// group's admins signed, rather than the name inside the message.
    public static func namedByMemberRecord(_ message: StoredMessage, in state: GroupState) -> StoredMessage {
        guard let member = state.members[message.sender], member.identity.displayName != message.senderName else {
            return message
        }
        return message.withSenderName(member.identity.displayName)
    }

    func saveEpochKey(_ key: SymmetricKey, epoch: UInt64, group: String) throws(LocalStoreError) {
        try setSecret(key.withUnsafeBytes { Data($0) }, .epochKey(group: group, epoch: epoch))
    }

    /// Notes that the secret store holds a key for this epoch (the key
    /// itself is not in the database).
    private static func recordKey(epoch: UInt64, group: String, db: Database) throws {
        try db.execute(
            sql: "INSERT OR IGNORE INTO epoch_key (group_id, epoch, key) VALUES (?, ?, x'')",
            arguments: [group, Int64(epoch)])
    }

    static func setCursor(_ topic: TopicName, seq: UInt64, db: Database) throws {
        try db.execute(
            sql: """
                INSERT INTO cursor (topic, seq) VALUES (?, ?)
                ON CONFLICT(topic) DO UPDATE SET seq = MAX(seq, excluded.seq)
                """,
            arguments: [topic.rawValue, Int64(seq)])
    }

    private static func groupRecord(row: Row) throws -> GroupRecord {
        let snapshot = try WireGroupSnapshot(serializedBytes: row["snapshot"] as Data)
        let groupID: String = row["group_id"]
        let statusText: String = row["status"]
        let state = try GroupState(snapshot: snapshot)
        return GroupRecord(
            groupID: groupID, topicID: row["topic_id"], state: state,
            status: GroupRecord.Status(rawValue: statusText) ?? .active,
            epochLink: row["epoch_link"], lastControlSeq: UInt64(row["last_control_seq"] as Int64),
            divergence: row["divergence"])
    }
}
