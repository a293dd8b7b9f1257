import Crypto
import Foundation
import GRDB
import RallyCrypto
import RallyWire

/// A join this identity started with an invite, as persisted between CLI
/// invocations. The state machine is rebuilt from it and written back
/// after every event.
public struct JoinAttempt: Sendable, Equatable, Codable {
    public enum Phase: String, Sendable, Codable {
        case validated, joining, awaitingApproval, joined, failed, cancelled
    }

    /// Hex of the request id, which is also the join request's message id.
    public let requestID: String
    public let invite: JoinStateMachine.InviteSummary
    public let slug: String
    public var phase: Phase
    public var groupID: String?
    public var existing: Bool
    public var errorType: JoinErrorType?
    public var reason: String?
    public let startedAt: Date
    public var updatedAt: Date

    public var machine: JoinStateMachine {
        switch phase {
        case .validated: JoinStateMachine(state: .validated(invite))
        case .joining: JoinStateMachine(state: .joining(invite))
        case .awaitingApproval: JoinStateMachine(state: .awaitingApproval(invite))
        case .joined: JoinStateMachine(state: .joined(groupID: groupID ?? "", existing: existing))
        case .failed:
            JoinStateMachine(state: .joinFailed(.rejected(errorType ?? .genericFailure, reason: reason)))
        case .cancelled: JoinStateMachine(state: .cancelled)
        }
    }

    public var isFinal: Bool { machine.state.isFinal }

    /// The user-facing line for the attempt's outcome so far.
    public var userMessage: String { machine.state.userMessage ?? "" }

    /// Takes the state machine's new state. States the store cannot hold
    /// (validating, uninitialized, a local validation failure) never reach
    /// a persisted attempt.
    mutating func adopt(_ state: JoinStateMachine.State, at date: Date) {
        updatedAt = date
        switch state {
        case .validated: phase = .validated
        case .joining: phase = .joining
        case .awaitingApproval: phase = .awaitingApproval
        case .joined(let groupID, let existing):
            phase = .joined
            self.groupID = groupID
            self.existing = existing
        case .joinFailed(.rejected(let type, let reason)):
            phase = .failed
            errorType = type
            self.reason = reason
        case .joinFailed(.invalidInvite(let error)):
            phase = .failed
            errorType = .genericFailure
            reason = error.description
        case .cancelled: phase = .cancelled
        case .uninitialized, .validating: break
        }
    }
}

/// A join answer to apply to the attempts it concerns, together with the
/// message that carried it.
public struct JoinEventForStore: Sendable {
    public let tag: String
    public let event: JoinStateMachine.Event
}

/// What an admin's client did with one join request, kept so a request is
/// handled once, ever.
public enum JoinRequestOutcome: String, Sendable, Codable {
    case admitted, alreadyMember, rejected, blocked, ignored
}

extension LocalStore {
    static func registerInviteMigrations(_ migrator: inout DatabaseMigrator) {
        migrator.registerMigration("v3-invites") { db in
            try db.create(table: "invite_seed") { table in
                table.column("group_id", .text).primaryKey()
                table.column("seed", .blob).notNull()
            }
            try db.create(table: "join_attempt") { table in
                table.column("request_id", .text).primaryKey()
                table.column("tag", .text).notNull().indexed()
                table.column("record", .blob).notNull()
                table.column("started_at_ms", .integer).notNull()
            }
            try db.create(table: "join_request_seen") { table in
                table.column("request_id", .text).primaryKey()
                table.column("group_id", .text).notNull()
                table.column("joiner", .text).notNull()
                table.column("outcome", .text).notNull()
                table.column("detail", .text)
                table.column("at_ms", .integer).notNull()
            }
            try db.create(table: "blocked_inbox") { table in
                table.column("inbox_id", .text).primaryKey()
                table.column("reason", .text).notNull()
                table.column("at_ms", .integer).notNull()
            }
        }
        migrator.registerMigration("v4-blocks-per-group") { db in
            // Blocks were global and forever; a block now holds for one
            // group's join requests and can be lifted.
            try db.create(table: "blocked_join_sender") { table in
                table.column("group_id", .text).notNull()
                table.column("inbox_id", .text).notNull()
                table.column("reason", .text).notNull()
                table.column("at_ms", .integer).notNull()
                table.primaryKey(["group_id", "inbox_id"])
            }
            try db.drop(table: "blocked_inbox")
            // Seeds of invite identities a rotation retired: the admins who
            // stayed keep reading their join inboxes, so a request made with
            // an old invite is answered invite_revoked instead of nothing.
            try db.create(table: "retired_invite_seed") { table in
                table.column("group_id", .text).notNull()
                // The retired identity's inbox; its seed is in the secret store.
                table.column("inbox_id", .text).notNull()
                table.primaryKey(["group_id", "inbox_id"])
            }
        }
    }

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
                try db.execute(
                    sql: "INSERT OR IGNORE INTO retired_invite_seed (group_id, inbox_id) VALUES (?, ?)",
                    arguments: [group, inbox])
            }
        }
        try setSecret(bytes, .inviteSeed(group: group))
    }

    /// Notes that the secret store holds this group's invite seed (the seed
    /// itself is not in the database).
    static func recordInviteSeed(group: String, db: Database) throws {
        try db.execute(sql: "INSERT OR IGNORE INTO invite_seed (group_id, seed) VALUES (?, x'')", arguments: [group])
    }

    public func inviteSeed(group: String) throws(LocalStoreError) -> SymmetricKey? {
        try secret(.inviteSeed(group: group)).map { SymmetricKey(data: $0) }
    }

    /// Every invite seed this client holds, current and retired, by group.
    public func inviteSeeds() throws(LocalStoreError) -> [(groupID: String, seed: SymmetricKey)] {
        let (groups, retired) = try read { db in
            (
                try String.fetchAll(db, sql: "SELECT group_id FROM invite_seed ORDER BY group_id"),
                try Row.fetchAll(db, sql: "SELECT group_id, inbox_id FROM retired_invite_seed ORDER BY group_id")
                    .map { (group: $0["group_id"] as String, inbox: $0["inbox_id"] as String) }
            )
        }
        var seeds: [(groupID: String, seed: SymmetricKey)] = []
        for group in groups {
            if let seed = try inviteSeed(group: group) { seeds.append((groupID: group, seed: seed)) }
        }
        for (group, inbox) in retired {
            if let seed = try secret(.retiredInviteSeed(group: group, inbox: inbox)) {
                seeds.append((groupID: group, seed: SymmetricKey(data: seed)))
            }
        }
        return seeds
    }

    /// Removes a group from this device (its state, keys and messages). The
    /// invite seed stays, so requests still arriving for it are answered
    /// `conversation_not_found` instead of never.
    public func forgetGroup(_ groupID: String) throws(LocalStoreError) {
        let epochs = try write { db in
            let epochs = try Int64.fetchAll(
                db, sql: "SELECT epoch FROM epoch_key WHERE group_id = ?", arguments: [groupID])
            try db.execute(sql: "DELETE FROM group_info WHERE group_id = ?", arguments: [groupID])
            try db.execute(sql: "DELETE FROM epoch_key WHERE group_id = ?", arguments: [groupID])
            try db.execute(sql: "DELETE FROM message WHERE conversation = ?", arguments: [groupID])
            return epochs
        }
        // Keys after the records: a crash in between leaves unused keys.
        for epoch in epochs { try removeSecret(.epochKey(group: groupID, epoch: UInt64(max(0, epoch)))) }
    }

    // MARK: Join attempts (joiner)

    public func saveJoinAttempt(_ attempt: JoinAttempt) throws(LocalStoreError) {
        try write { db in try Self.saveJoinAttempt(attempt, db: db) }
    }

    static func saveJoinAttempt(_ attempt: JoinAttempt, db: Database) throws {
        try db.execute(
            sql: """
                INSERT INTO join_attempt (request_id, tag, record, started_at_ms) VALUES (?, ?, ?, ?)
                ON CONFLICT(request_id) DO UPDATE SET record = excluded.record
                """,
            arguments: [
                attempt.requestID, attempt.invite.tag, try JSONEncoder().encode(attempt), millis(attempt.startedAt),
            ])
    }

    /// Join attempts, newest first.
    public func joinAttempts() throws(LocalStoreError) -> [JoinAttempt] {
        try read { db in
            try Data.fetchAll(db, sql: "SELECT record FROM join_attempt ORDER BY started_at_ms DESC, request_id")
                .map { try JSONDecoder().decode(JoinAttempt.self, from: $0) }
        }
    }

    /// Applies an answer to every unfinished attempt with its tag; the state
    /// machine drops what does not fit (wrong sender, already final).
    static func applyJoinEvent(_ joinEvent: JoinEventForStore, db: Database) throws {
        let records = try Data.fetchAll(
            db, sql: "SELECT record FROM join_attempt WHERE tag = ?", arguments: [joinEvent.tag])
        for record in records { try apply(joinEvent.event, to: record, db: db) }
    }

    /// Applies a local event (sent, cancel) to one attempt and returns it
    /// as it now stands; nil if there is no such attempt.
    public func updateJoinAttempt(
        requestID: String, _ event: JoinStateMachine.Event
    ) throws(LocalStoreError) -> JoinAttempt? {
        try write { db in
            try Data.fetchOne(db, sql: "SELECT record FROM join_attempt WHERE request_id = ?", arguments: [requestID])
                .map { try Self.apply(event, to: $0, db: db) }
        }
    }

    /// Runs one stored attempt's state machine on `event`, saving the
    /// attempt if the event moved it.
    @discardableResult
    private static func apply(_ event: JoinStateMachine.Event, to record: Data, db: Database) throws -> JoinAttempt {
        var attempt = try JSONDecoder().decode(JoinAttempt.self, from: record)
        var machine = attempt.machine
        guard machine.apply(event) == nil else { return attempt }
        attempt.adopt(machine.state, at: Date())
        try saveJoinAttempt(attempt, db: db)
        return attempt
    }

    // MARK: Join requests (admins)

    public func joinRequestSeen(_ requestID: String) throws(LocalStoreError) -> Bool {
        try read { db in
            try Bool.fetchOne(
                db, sql: "SELECT 1 FROM join_request_seen WHERE request_id = ?", arguments: [requestID]) ?? false
        }
    }

    /// Records what was done with a request and moves the invite inbox's
    /// cursor past it, in one transaction.
    public func finishJoinRequest(
        requestID: String?, groupID: String, joiner: InboxID?, outcome: JoinRequestOutcome, detail: String?,
        block: Bool, topic: TopicName, seq: UInt64
    ) throws(LocalStoreError) {
        try Self.checkSeq(seq)
        try write { db in
            let now = Self.millis(Date())
            if let requestID {
                try db.execute(
                    sql: """
                        INSERT OR IGNORE INTO join_request_seen (request_id, group_id, joiner, outcome, detail, at_ms)
                        VALUES (?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [requestID, groupID, joiner?.rawValue ?? "", outcome.rawValue, detail, now])
            }
            if block, let joiner {
                try db.execute(
                    sql: """
                        INSERT OR IGNORE INTO blocked_join_sender (group_id, inbox_id, reason, at_ms)
                        VALUES (?, ?, ?, ?)
                        """,
                    arguments: [groupID, joiner.rawValue, detail ?? "", now])
            }
            try Self.setCursor(topic, seq: seq, db: db)
        }
    }

    public func isBlocked(_ inbox: InboxID, group: String) throws(LocalStoreError) -> Bool {
        try read { db in
            try Bool.fetchOne(
                db, sql: "SELECT 1 FROM blocked_join_sender WHERE group_id = ? AND inbox_id = ?",
                arguments: [group, inbox.rawValue]) ?? false
        }
    }

    /// Senders blocked from a group's join requests, with why.
    public func blockedJoinSenders(group: String) throws(LocalStoreError) -> [(inbox: String, reason: String)] {
        try read { db in
            try Row.fetchAll(
                db, sql: "SELECT inbox_id, reason FROM blocked_join_sender WHERE group_id = ? ORDER BY at_ms",
                arguments: [group]
            ).map { (inbox: $0["inbox_id"], reason: $0["reason"]) }
        }
    }

    /// Lifts a block; returns whether there was one.
    @discardableResult
    public func unblockJoinSender(_ inbox: InboxID, group: String) throws(LocalStoreError) -> Bool {
        try write { db in
            try db.execute(
                sql: "DELETE FROM blocked_join_sender WHERE group_id = ? AND inbox_id = ?",
                arguments: [group, inbox.rawValue])
            return db.changesCount > 0
        }
    }
}
