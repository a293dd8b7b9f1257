public import Foundation
import GRDB

/// The embedded escrow store: `escrows.sqlite` in the relay's data
/// directory (WAL, `synchronous=FULL`, owner-only), apart from the topics'
/// database so its small, rare writes never wait behind a publish batch.
public final class SQLiteEscrowStore: EscrowStore {
    /// Internal for the durability test, which reads its writer's pragma.
    let pool: DatabasePool

    /// Opens (or creates) the store in `dataDirectory`, which is created
    /// owner-only when missing.
    public init(dataDirectory: URL) throws {
        pool = try OwnerOnlyFile.openPool(
            dataDirectory.appendingPathComponent("escrows.sqlite"), label: "rally.relay.escrows")
        try Self.migrator.migrate(pool)
    }

    private static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1-escrows") { db in
            try db.create(table: "escrows") { table in
                table.primaryKey("id", .text)
                table.column("creator", .text).notNull()
                table.column("owner_key", .blob).notNull()
                table.column("nominee_key", .blob).notNull()
                table.column("wait_ms", .integer).notNull()
                table.column("sealed_grant", .blob).notNull()
                // NULL while no request stands / before any rejection.
                table.column("requested_at_ms", .integer)
                table.column("approved", .boolean).notNull()
                table.column("rejected_at_ms", .integer)
                table.column("created_at_ms", .integer).notNull()
            }
            try db.create(index: "escrows_creator", on: "escrows", columns: ["creator"])
        }
        return migrator
    }

    public func create(_ record: EscrowRecord, maxPerCreator: Int) async throws -> Result<EscrowRecord, EscrowRefusal> {
        try await pool.write { db -> Result<EscrowRecord, EscrowRefusal> in
            if let existing = try Self.record(record.id, db) {
                guard existing.creator == record.creator, existing.ownerKey == record.ownerKey else {
                    return .failure(.taken)
                }
                return .success(existing)
            }
            let count =
                try Int.fetchOne(
                    db, sql: "SELECT COUNT(*) FROM escrows WHERE creator = ?", arguments: [record.creator]) ?? 0
            guard count < maxPerCreator else { return .failure(.quotaExceeded(limit: maxPerCreator)) }
            try db.execute(
                sql: """
                    INSERT INTO escrows (id, creator, owner_key, nominee_key, wait_ms, sealed_grant, requested_at_ms,
                        approved, rejected_at_ms, created_at_ms)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    record.id.rawValue, record.creator, record.ownerKey, record.nomineeKey, record.waitMilliseconds,
                    record.sealedGrant, record.requestedAtMilliseconds, record.approved,
                    record.rejectedAtMilliseconds, record.createdAtMilliseconds,
                ])
            return .success(record)
        }
    }

    public func record(id: EscrowID) async throws -> EscrowRecord? {
        try await pool.read { db in try Self.record(id, db) }
    }

    public func update(
        id: EscrowID, _ change: @Sendable (EscrowRecord) -> Result<EscrowRecord, EscrowRefusal>
    ) async throws -> Result<EscrowRecord, EscrowRefusal> {
        try await pool.write { db -> Result<EscrowRecord, EscrowRefusal> in
            guard let record = try Self.record(id, db) else { return .failure(.notFound) }
            let result = change(record)
            if case .success(let changed) = result, changed != record {
                try db.execute(
                    sql: """
                        UPDATE escrows SET sealed_grant = ?, requested_at_ms = ?, approved = ?, rejected_at_ms = ?
                        WHERE id = ?
                        """,
                    arguments: [
                        changed.sealedGrant, changed.requestedAtMilliseconds, changed.approved,
                        changed.rejectedAtMilliseconds, id.rawValue,
                    ])
            }
            return result
        }
    }

    public func delete(
        id: EscrowID, if allowed: @Sendable (EscrowRecord) -> Result<Void, EscrowRefusal>
    ) async throws -> Result<Void, EscrowRefusal> {
        try await pool.write { db -> Result<Void, EscrowRefusal> in
            guard let record = try Self.record(id, db) else { return .failure(.notFound) }
            let result = allowed(record)
            if case .success = result {
                try db.execute(sql: "DELETE FROM escrows WHERE id = ?", arguments: [id.rawValue])
            }
            return result
        }
    }

    public func close() async throws {
        try pool.close()
    }

    private static func record(_ id: EscrowID, _ db: Database) throws -> EscrowRecord? {
        guard
            let row = try Row.fetchOne(
                db,
                sql: """
                    SELECT creator, owner_key, nominee_key, wait_ms, sealed_grant, requested_at_ms, approved,
                        rejected_at_ms, created_at_ms
                    FROM escrows WHERE id = ?
                    """,
                arguments: [id.rawValue])
        else { return nil }
        return EscrowRecord(
            id: id, creator: row["creator"], ownerKey: row["owner_key"], nomineeKey: row["nominee_key"],
            waitMilliseconds: row["wait_ms"], sealedGrant: row["sealed_grant"],
            requestedAtMilliseconds: row["requested_at_ms"], approved: row["approved"],
            rejectedAtMilliseconds: row["rejected_at_ms"], createdAtMilliseconds: row["created_at_ms"])
    }
}
