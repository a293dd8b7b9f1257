import Crypto
import Foundation
import GRDB
import RallyCrypto
import RallyWire

/// That the secret store holds a group's invite seed (the seed itself is
/// not in the database): this admin answers the group's join requests.
struct InviteSeedRecord: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "invite_seed"

    var groupID: String
    /// Empty since v4-secrets.
    var seed = Data()

    enum CodingKeys: String, CodingKey { case groupID = "group_id", seed }

    static func createTable(_ db: Database) throws {
        try db.create(table: databaseTableName) { table in
            table.column("group_id", .text).primaryKey()
            table.column("seed", .blob).notNull()
        }
    }

    /// v4-secrets: the seeds move to the secret store.
    static func moveSeedsToSecrets(_ db: Database) throws {
        for record in try fetchAll(db) {
            try SecretRecord.set(record.seed, named: .inviteSeed(group: record.groupID), db: db)
        }
        try db.execute(sql: "UPDATE invite_seed SET seed = x''")
    }

    static func note(group: String, _ db: Database) throws {
        try db.run(cached: "INSERT OR IGNORE INTO invite_seed (group_id, seed) VALUES (?, x'')", [group])
    }
}

/// The seed of an invite identity a rotation retired: the admins who stayed
/// keep reading its join inbox, so a request made with an old invite is
/// answered `invite_revoked` instead of never. The seed is in the secret
/// store.
struct RetiredInviteSeedRecord: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "retired_invite_seed"

    var groupID: String
    /// The retired identity's inbox.
    var inboxID: String

    enum CodingKeys: String, CodingKey { case groupID = "group_id", inboxID = "inbox_id" }

    static func createTable(_ db: Database) throws {
        try db.create(table: databaseTableName) { table in
            table.column("group_id", .text).notNull()
            table.column("inbox_id", .text).notNull()
            table.primaryKey(["group_id", "inbox_id"])
        }
    }
}

/// A join request this admin handled, and what it did: a request is
/// handled once, ever.
struct JoinRequestSeenRecord: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "join_request_seen"

    var requestID: String
    var groupID: String
    var joiner: String
    var outcome: String
    var detail: String?
    var atMs: Int64

    enum CodingKeys: String, CodingKey {
        case requestID = "request_id", groupID = "group_id", joiner, outcome, detail, atMs = "at_ms"
    }

    static func createTable(_ db: Database) throws {
        try db.create(table: databaseTableName) { table in
            table.column("request_id", .text).primaryKey()
            table.column("group_id", .text).notNull()
            table.column("joiner", .text).notNull()
            table.column("outcome", .text).notNull()
            table.column("detail", .text)
            table.column("at_ms", .integer).notNull()
        }
    }
}

/// A sender this admin blocked from one group's join requests.
struct BlockedJoinSenderRecord: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "blocked_join_sender"

    var groupID: String
    var inboxID: String
    var reason: String
    var atMs: Int64

    enum CodingKeys: String, CodingKey { case groupID = "group_id", inboxID = "inbox_id", reason, atMs = "at_ms" }

    enum Columns {
        static let groupID = Column(CodingKeys.groupID)
        static let atMs = Column(CodingKeys.atMs)
    }

    static func createTable(_ db: Database) throws {
        try db.create(table: databaseTableName) { table in
            table.column("group_id", .text).notNull()
            table.column("inbox_id", .text).notNull()
            table.column("reason", .text).notNull()
            table.column("at_ms", .integer).notNull()
            table.primaryKey(["group_id", "inbox_id"])
        }
    }

    static func key(_ inbox: InboxID, group: String) -> [String: any DatabaseValueConvertible] {
        ["group_id": group, "inbox_id": inbox.rawValue]
    }
}

extension LocalStore {
    // MARK: Invite seeds (admins)

    /// Stores a group's invite seed. A seed it replaces (a rotation after
    /// an admin lost their rights) is kept as retired: its join inbox is
    /// still read, to answer requests made with old invites.
    func saveInviteSeed(_ seed: SymmetricKey, group: String) throws(LocalStoreError) {
        let bytes = seed.withUnsafeBytes { Data($0) }
        if let old = try secret(.inviteSeed(group: group)), old != bytes,
            let keys = try? InviteKeys(seed: SymmetricKey(data: old))
        {
            let inbox = keys.identity.inboxID.rawValue
            try setSecret(old, .retiredInviteSeed(group: group, inbox: inbox))
            try write { db in
                try RetiredInviteSeedRecord(groupID: group, inboxID: inbox).insert(db, onConflict: .ignore)
            }
        }
        try setSecret(bytes, .inviteSeed(group: group))
    }

    func inviteSeed(group: String) throws(LocalStoreError) -> SymmetricKey? {
        try secret(.inviteSeed(group: group)).map { SymmetricKey(data: $0) }
    }

    /// Every invite seed this client holds, current and retired, by group.
    func inviteSeeds() throws(LocalStoreError) -> [(groupID: String, seed: SymmetricKey)] {
        let (groups, retired) = try read { db in
            (
                try InviteSeedRecord.order(Column("group_id")).fetchAll(db).map(\.groupID),
                try RetiredInviteSeedRecord.order(Column("group_id")).fetchAll(db)
            )
        }
        var seeds: [(groupID: String, seed: SymmetricKey)] = []
        for group in groups {
            if let seed = try inviteSeed(group: group) { seeds.append((groupID: group, seed: seed)) }
        }
        for record in retired {
            if let seed = try secret(.retiredInviteSeed(group: record.groupID, inbox: record.inboxID)) {
                seeds.append((groupID: record.groupID, seed: SymmetricKey(data: seed)))
            }
        }
        return seeds
    }

    // MARK: Join requests (admins)

    /// Which of a batch's requests were handled before, and which of its
    /// senders are blocked from `group`, in one read.
    func joinRequestHistory(
        requestIDs: [String], senders: [InboxID], group: String
    ) throws(LocalStoreError) -> (seen: Set<String>, blocked: Set<InboxID>) {
        try read { db in
            var seen: Set<String> = []
            for requestID in requestIDs
            where try db.fetchValue(
                Bool.self, cached: "SELECT 1 FROM join_request_seen WHERE request_id = ?", [requestID])
                != nil
            {
                seen.insert(requestID)
            }
            var blocked: Set<InboxID> = []
            for sender in senders
            where try db.fetchValue(
                Bool.self, cached: "SELECT 1 FROM blocked_join_sender WHERE group_id = ? AND inbox_id = ?",
                [group, sender.rawValue]) != nil
            {
                blocked.insert(sender)
            }
            return (seen, blocked)
        }
    }

    /// Records what was done with each request of a batch and moves the
    /// invite inbox's cursor past them, in one transaction.
    func finishJoinRequests(
        _ finished: [FinishedJoinRequest], groupID: String, topic: TopicName, now: Date
    ) throws(LocalStoreError) {
        guard let last = finished.map(\.seq).max() else { return }
        try Self.checkSeq(last)
        let at = ClientClock.millis(now)
        try write { db in
            for request in finished {
                if let requestID = request.requestID {
                    try db.run(
                        cached: """
                            INSERT OR IGNORE INTO join_request_seen (request_id, group_id, joiner, outcome, detail, at_ms)
                            VALUES (?, ?, ?, ?, ?, ?)
                            """,
                        [
                            requestID, groupID, request.joiner?.rawValue ?? "", request.outcome.rawValue,
                            request.detail, at,
                        ])
                }
                if request.block, let joiner = request.joiner {
                    try BlockedJoinSenderRecord(
                        groupID: groupID, inboxID: joiner.rawValue, reason: request.detail ?? "", atMs: at
                    ).insert(db, onConflict: .ignore)
                }
            }
            try CursorRecord.advance(topic, to: last, db)
        }
    }

    /// Senders blocked from a group's join requests, with why.
    func blockedJoinSenders(group: String) throws(LocalStoreError) -> [(inbox: String, reason: String)] {
        try read { db in
            try BlockedJoinSenderRecord.filter(BlockedJoinSenderRecord.Columns.groupID == group)
                .order(BlockedJoinSenderRecord.Columns.atMs).fetchAll(db).map { (inbox: $0.inboxID, reason: $0.reason) }
        }
    }

    /// Lifts a block; returns whether there was one.
    @discardableResult
    func unblockJoinSender(_ inbox: InboxID, group: String) throws(LocalStoreError) -> Bool {
        try write { db in
            try BlockedJoinSenderRecord.deleteOne(db, key: BlockedJoinSenderRecord.key(inbox, group: group))
        }
    }
}

/// What was done with one request of the invite inbox, to record.
struct FinishedJoinRequest: Sendable, Equatable {
    /// Nil for a duplicate (the first handling's record stays) and for an
    /// envelope that did not open.
    let requestID: String?
    let joiner: InboxID?
    let outcome: JoinRequestOutcome
    let detail: String?
    /// Whether the sender is blocked from the group from now on.
    let block: Bool
    let seq: UInt64
}
