import Foundation
import GRDB

/// Moves a store's envelopes out of SQLite's `envelope_log` (ADR 0029)
/// into segments (ADR 0030), once, so that a crash at any point leaves
/// either the table or the segments as the one copy:
/// 1. the rows are written to segments in a staging directory and synced;
/// 2. one transaction checkpoints every topic's head and drops the table;
/// 3. the staging directory is renamed into place.
/// A crash before 2 leaves the table, and the staging copy is written
/// again; a crash between 2 and 3 leaves a complete staging copy, and the
/// rename is done at the next open.
enum EnvelopeLogMove {
    /// Rows per record: records of about a megabyte with relay-sized
    /// payloads, each synced.
    static let rowsPerRecord = 2048

    static func moveIfNeeded(
        _ pool: DatabasePool, into directory: URL, firstSegmentBytes: Int, maxSegmentBytes: Int
    ) throws {
        let manager = FileManager.default
        let staging = URL(fileURLWithPath: directory.path + ".moving")
        let parent = directory.deletingLastPathComponent()
        guard try pool.read({ try $0.tableExists("envelope_log") }) else {
            if !manager.fileExists(atPath: directory.path) {
                if manager.fileExists(atPath: staging.path) {
                    try manager.moveItem(at: staging, to: directory)
                } else {
                    try manager.createDirectory(
                        at: directory, withIntermediateDirectories: false, attributes: ownerOnly)
                }
                try SegmentFiles.syncDirectory(parent)
            }
            return
        }
        guard !manager.fileExists(atPath: directory.path) else {
            throw SegmentDamaged(
                path: directory.path, offset: 0,
                reason: "the database still holds envelope_log beside segments: it is older than the segments")
        }
        if manager.fileExists(atPath: staging.path) { try manager.removeItem(at: staging) }
        try manager.createDirectory(at: staging, withIntermediateDirectories: false, attributes: ownerOnly)
        let files = SegmentFiles(
            directory: staging, firstSegmentBytes: firstSegmentBytes, maxSegmentBytes: maxSegmentBytes)
        var writer = SegmentWriter(files: files, tail: SegmentFiles.Tail(segment: nil, offset: 0))
        var heads: [String: AppendRules.Head] = [:]
        try pool.read { db in
            let rows = try Row.fetchCursor(
                db,
                sql: """
                    SELECT topic, seq, server_time_ms, payload, should_push, expires_at_ms, idempotency_key,
                    control, retires_key FROM envelope_log ORDER BY id
                    """)
            var batch: [LoggedEntry] = []
            while let row = try rows.next() {
                let entry = LoggedEntry(
                    topic: row["topic"], seq: row["seq"], serverTime: row["server_time_ms"],
                    expiresAt: row["expires_at_ms"],
                    payload: row["payload"], shouldPush: row["should_push"], control: row["control"],
                    idempotencyKey: row["idempotency_key"], retiresKey: row["retires_key"], registersKey: nil,
                    rotatesTo: nil)
                heads[entry.topic, default: AppendRules.Head()].include(entry)
                batch.append(entry)
                if batch.count == rowsPerRecord {
                    _ = try writer.append(SegmentRecord.encode(batch))
                    batch = []
                }
            }
            if !batch.isEmpty { _ = try writer.append(SegmentRecord.encode(batch)) }
        }
        try SegmentFiles.syncDirectory(staging)
        // `topic_keys` is current through every moved row: the heads say so,
        // and the moved entries carry no key changes to replay.
        try pool.write { db in
            let keep = try db.cachedStatement(
                sql: """
                    INSERT INTO topics (name, last_seq, last_control_seq) VALUES (?, ?, ?)
                    ON CONFLICT (name) DO UPDATE SET last_seq = max(last_seq, excluded.last_seq),
                    last_control_seq = max(last_control_seq, excluded.last_control_seq)
                    """)
            for (topic, head) in heads { try keep.execute(arguments: [topic, head.lastSeq, head.lastControlSeq]) }
            try db.drop(table: "envelope_log")
        }
        try manager.moveItem(at: staging, to: directory)
        try SegmentFiles.syncDirectory(parent)
    }

    private static var ownerOnly: [FileAttributeKey: Any] { [.posixPermissions: 0o700] }
}
