public import Foundation
import GRDB

/// Where each inbox's push target is kept: one webhook URL per inbox (an
/// identity is one device). Nothing else: the relay learns that an inbox
/// wants pushes and where to send them, which is what calling it needs.
public protocol PushTargetStore: Sendable {
    /// Sets (or replaces) the inbox's target.
    func register(inbox: String, url: URL, nowMilliseconds: Int64) async throws
    /// Removes the inbox's target; true if there was one.
    @discardableResult func unregister(inbox: String) async throws -> Bool
    func target(inbox: String) async throws -> URL?
    /// Every inbox with a target, read once when the relay starts.
    func registeredInboxes() async throws -> [String]
    func close() async throws
}

/// The embedded push target store: `push.sqlite` in the relay's data
/// directory (WAL, `synchronous=FULL`, owner-only), apart from the topics'
/// database like the escrows.
public final class SQLitePushTargetStore: PushTargetStore {
    /// Internal for the durability test, which reads its writer's pragma.
    let pool: DatabasePool

    public init(dataDirectory: URL) throws {
        pool = try OwnerOnlyFile.openPool(
            dataDirectory.appendingPathComponent("push.sqlite"), label: "rally.relay.push")
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1-push-targets") { db in
            try db.create(table: "push_targets") { table in
                table.primaryKey("inbox_id", .text)
                table.column("url", .text).notNull()
                table.column("registered_at_ms", .integer).notNull()
            }
        }
        try migrator.migrate(pool)
    }

    public func register(inbox: String, url: URL, nowMilliseconds: Int64) async throws {
        try await pool.write { db in
            try db.execute(
                sql: """
                    INSERT INTO push_targets (inbox_id, url, registered_at_ms) VALUES (?, ?, ?)
                    ON CONFLICT(inbox_id) DO UPDATE SET url = excluded.url, registered_at_ms = excluded.registered_at_ms
                    """, arguments: [inbox, url.absoluteString, nowMilliseconds])
        }
    }

    public func unregister(inbox: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM push_targets WHERE inbox_id = ?", arguments: [inbox])
            return db.changesCount > 0
        }
    }

    public func target(inbox: String) async throws -> URL? {
        try await pool.read { db in
            try String.fetchOne(db, sql: "SELECT url FROM push_targets WHERE inbox_id = ?", arguments: [inbox])
                .flatMap(URL.init(string:))
        }
    }

    public func registeredInboxes() async throws -> [String] {
        try await pool.read { db in try String.fetchAll(db, sql: "SELECT inbox_id FROM push_targets") }
    }

    public func close() async throws {
        try pool.close()
    }
}
