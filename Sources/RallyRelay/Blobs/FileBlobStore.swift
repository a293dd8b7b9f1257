import Crypto
public import Foundation
import GRDB

/// The embedded blob store: metadata in `blobs.sqlite` (WAL,
/// `synchronous=FULL`), bytes in one file per blob under `blobs/`, fsynced
/// before an append is acknowledged. Appends and completions run inside the
/// metadata's write transaction, so two uploads of one blob are serialized
/// and `received` never runs ahead of the file.
public final class FileBlobStore: BlobStore {
    /// Bytes hashed per read while a blob is completed.
    static let hashReadBytes = 1 << 20

    /// Internal for the durability test, which reads its writer's pragma.
    let pool: DatabasePool
    private let directory: URL

    /// Opens (or creates) the store in `dataDirectory`, which is created
    /// owner-only when missing.
    public init(dataDirectory: URL) throws {
        directory = dataDirectory.appendingPathComponent("blobs", isDirectory: true)
        try FileManager.default.createDirectory(
            at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        pool = try OwnerOnlyFile.openPool(
            dataDirectory.appendingPathComponent("blobs.sqlite"), label: "rally.relay.blobs")
        try Self.migrator.migrate(pool)
    }

    private static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1-blobs") { db in
            try db.create(table: "blobs") { table in
                table.primaryKey("id", .text)
                table.column("owner", .text).notNull()
                table.column("size", .integer).notNull()
                table.column("received", .integer).notNull()
                table.column("complete", .boolean).notNull()
                table.column("created_at_ms", .integer).notNull()
            }
            try db.create(index: "blobs_owner", on: "blobs", columns: ["owner", "complete"])
            try db.create(
                index: "blobs_unfinished", on: "blobs", columns: ["created_at_ms"], condition: !Column("complete"))
        }
        return migrator
    }

    private func fileURL(_ id: BlobID) -> URL {
        directory.appendingPathComponent(String(id.rawValue.prefix(2)), isDirectory: true)
            .appendingPathComponent(id.rawValue)
    }

    public func create(
        id: BlobID, owner: String, size: Int64, quota: BlobQuota, nowMilliseconds: Int64
    ) async throws -> Result<BlobInfo, BlobRefusal> {
        let url = fileURL(id)
        return try await pool.write { db -> Result<BlobInfo, BlobRefusal> in
            if let existing = try Self.info(id, db) {
                guard existing.owner == owner else { return .failure(.notOwner) }
                guard existing.size == size, !existing.complete else { return .failure(.exists(existing)) }
                return .success(existing)
            }
            let used =
                try Int64.fetchOne(
                    db, sql: "SELECT COALESCE(SUM(size), 0) FROM blobs WHERE owner = ?", arguments: [owner])
                ?? 0
            guard used + size <= quota.bytesPerIdentity else {
                return .failure(.quotaExceeded(usedBytes: used, quotaBytes: quota.bytesPerIdentity))
            }
            let unfinished =
                try Int.fetchOne(
                    db, sql: "SELECT COUNT(*) FROM blobs WHERE owner = ? AND NOT complete", arguments: [owner]) ?? 0
            guard unfinished < quota.unfinishedPerIdentity else {
                return .failure(.tooManyUnfinished(limit: quota.unfinishedPerIdentity))
            }
            try FileManager.default.createDirectory(
                at: url.deletingLastPathComponent(), withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
            // A file left by a create whose transaction did not commit.
            try? FileManager.default.removeItem(at: url)
            guard
                FileManager.default.createFile(atPath: url.path, contents: nil, attributes: [.posixPermissions: 0o600])
            else { throw CocoaError(.fileWriteUnknown) }
            try db.execute(
                sql: "INSERT INTO blobs (id, owner, size, received, complete, created_at_ms) VALUES (?, ?, ?, 0, 0, ?)",
                arguments: [id.rawValue, owner, size, nowMilliseconds])
            return .success(
                BlobInfo(
                    id: id, owner: owner, size: size, received: 0, complete: false,
                    createdAtMilliseconds: nowMilliseconds))
        }
    }

    public func info(id: BlobID) async throws -> BlobInfo? {
        try await pool.read { db in try Self.info(id, db) }
    }

    public func append(
        id: BlobID, owner: String, offset: Int64, bytes: Data
    ) async throws -> Result<BlobInfo, BlobRefusal> {
        let url = fileURL(id)
        return try await pool.write { db -> Result<BlobInfo, BlobRefusal> in
            guard var blob = try Self.info(id, db) else { return .failure(.notFound) }
            guard blob.owner == owner else { return .failure(.notOwner) }
            guard !blob.complete else { return .failure(.exists(blob)) }
            guard offset == blob.received else { return .failure(.wrongOffset(received: blob.received)) }
            guard offset + Int64(bytes.count) <= blob.size else { return .failure(.beyondSize(size: blob.size)) }
            let handle = try FileHandle(forUpdating: url)
            defer { try? handle.close() }
            // Bytes past `received` are from an append that never committed.
            try handle.truncate(atOffset: UInt64(offset))
            try handle.seek(toOffset: UInt64(offset))
            try handle.write(contentsOf: bytes)
            try handle.synchronize()
            blob.received = offset + Int64(bytes.count)
            try db.execute(
                sql: "UPDATE blobs SET received = ? WHERE id = ?", arguments: [blob.received, id.rawValue])
            return .success(blob)
        }
    }

    public func complete(id: BlobID, owner: String, sha256: Data) async throws -> Result<BlobInfo, BlobRefusal> {
        let url = fileURL(id)
        return try await pool.write { db -> Result<BlobInfo, BlobRefusal> in
            guard var blob = try Self.info(id, db) else { return .failure(.notFound) }
            guard blob.owner == owner else { return .failure(.notOwner) }
            if blob.complete { return .success(blob) }
            guard blob.received == blob.size else {
                return .failure(.incomplete(received: blob.received, size: blob.size))
            }
            guard try Self.sha256(of: url, length: blob.size) == sha256 else {
                try FileHandle(forUpdating: url).truncate(atOffset: 0)
                try db.execute(sql: "UPDATE blobs SET received = 0 WHERE id = ?", arguments: [id.rawValue])
                return .failure(.integrityMismatch)
            }
            blob.complete = true
            try db.execute(sql: "UPDATE blobs SET complete = 1 WHERE id = ?", arguments: [id.rawValue])
            return .success(blob)
        }
    }

    public func read(id: BlobID, offset: Int64, length: Int) async throws -> Result<Data, BlobRefusal> {
        let url = fileURL(id)
        return try await pool.read { db -> Result<Data, BlobRefusal> in
            guard let blob = try Self.info(id, db) else { return .failure(.notFound) }
            guard blob.complete else { return .failure(.incomplete(received: blob.received, size: blob.size)) }
            guard offset >= 0, offset <= blob.size, length >= 0 else { return .failure(.outOfRange(size: blob.size)) }
            let count = Int(min(Int64(length), blob.size - offset))
            guard count > 0 else { return .success(Data()) }
            let handle = try FileHandle(forReadingFrom: url)
            defer { try? handle.close() }
            try handle.seek(toOffset: UInt64(offset))
            return .success(try handle.read(upToCount: count) ?? Data())
        }
    }

    public func delete(id: BlobID, owner: String) async throws -> Result<Void, BlobRefusal> {
        let url = fileURL(id)
        return try await pool.write { db -> Result<Void, BlobRefusal> in
            guard let blob = try Self.info(id, db) else { return .failure(.notFound) }
            guard blob.owner == owner else { return .failure(.notOwner) }
            try db.execute(sql: "DELETE FROM blobs WHERE id = ?", arguments: [id.rawValue])
            try? FileManager.default.removeItem(at: url)
            return .success(())
        }
    }

    public func deleteUnfinished(startedBefore cutoffMilliseconds: Int64) async throws -> Int {
        try await pool.write { db in
            let ids = try String.fetchAll(
                db, sql: "SELECT id FROM blobs WHERE NOT complete AND created_at_ms < ?",
                arguments: [cutoffMilliseconds])
            for raw in ids {
                guard let id = BlobID(raw) else { continue }
                try db.execute(sql: "DELETE FROM blobs WHERE id = ?", arguments: [raw])
                try? FileManager.default.removeItem(at: self.fileURL(id))
            }
            return ids.count
        }
    }

    public func close() async throws {
        try pool.close()
    }

    private static func info(_ id: BlobID, _ db: Database) throws -> BlobInfo? {
        guard
            let row = try Row.fetchOne(
                db, sql: "SELECT owner, size, received, complete, created_at_ms FROM blobs WHERE id = ?",
                arguments: [id.rawValue])
        else { return nil }
        return BlobInfo(
            id: id, owner: row["owner"], size: row["size"], received: row["received"], complete: row["complete"],
            createdAtMilliseconds: row["created_at_ms"])
    }

    private static func sha256(of url: URL, length: Int64) throws -> Data {
        let handle = try FileHandle(forReadingFrom: url)
        defer { try? handle.close() }
        var hasher = SHA256()
        var remaining = length
        while remaining > 0 {
            guard let chunk = try handle.read(upToCount: Int(min(Int64(hashReadBytes), remaining))), !chunk.isEmpty
            else { break }
            hasher.update(data: chunk)
            remaining -= Int64(chunk.count)
        }
        return Data(hasher.finalize())
    }
}
