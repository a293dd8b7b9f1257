import Foundation
import Testing

@testable import RallyRelay

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The spare segment (ADR 0031): the next segment is written full of zeros
/// before the writer needs it and renamed into place, so that a record's
/// sync does not also turn preallocated blocks into written ones.
@Suite("Spare segments", .timeLimit(.minutes(1)))
struct SpareSegmentTests {
    private static func entry(_ seq: Int64, payloadBytes: Int = 16) -> LoggedEntry {
        LoggedEntry(
            topic: "group/a", seq: seq, serverTime: 1, expiresAt: 0,
            payload: Data(repeating: UInt8(truncatingIfNeeded: seq), count: payloadBytes), shouldPush: false,
            control: false)
    }

    private static func inode(_ path: String) throws -> UInt64 {
        var status = stat()
        guard stat(path, &status) == 0 else { throw POSIXError(.ENOENT) }
        return UInt64(status.st_ino)
    }

    private static func contents(_ path: String) throws -> Data {
        try Data(contentsOf: URL(fileURLWithPath: path))
    }

    private static func mode(_ path: String) throws -> UInt32 {
        var status = stat()
        guard stat(path, &status) == 0 else { throw POSIXError(.ENOENT) }
        return UInt32(status.st_mode) & 0o777
    }

    @Test(
        "no spare until the newest segment is half full; then one of the next segment's size, all zeros, 0600; the next segment is that file, renamed"
    )
    func nextSegmentIsTheSpare() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let files = SegmentFiles(
            directory: directory.url, firstSegmentBytes: 4096, maxSegmentBytes: 16384, keepsSpare: true)
        var writer = SegmentWriter(files: files, tail: try files.scanAll { _, _ in })
        let sparePath = try #require(files.sparePath)
        _ = try writer.append(SegmentRecord.encode([Self.entry(1, payloadBytes: 1000)]))
        files.waitForSpare()
        #expect(files.spareCapacity == nil, "under half of the first segment")
        #expect(!FileManager.default.fileExists(atPath: sparePath))

        _ = try writer.append(SegmentRecord.encode([Self.entry(2, payloadBytes: 1200)]))
        files.waitForSpare()
        #expect(files.spareCapacity == 8192)
        #expect(files.plannedCapacity(of: 1) == 8192)
        #expect(try Self.contents(sparePath) == Data(count: 8192))
        #expect(try Self.mode(sparePath) == 0o600)
        let spareInode = try Self.inode(sparePath)

        let placed = try writer.append(SegmentRecord.encode([Self.entry(3, payloadBytes: 2500)]))
        #expect(placed.segment == 1 && placed.offset == 0)
        let segment = try #require(files.file(1))
        #expect(try Self.inode(segment.path) == spareInode)
        #expect(segment.capacity == 8192)
        #expect(files.spareCapacity == nil)
        #expect(!FileManager.default.fileExists(atPath: sparePath))
    }

    @Test("a spare of more than one chunk, ending in a part of one, is zeros to its last byte")
    func spareOfSeveralChunks() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let first = SpareSegment.chunkBytes * 3 / 4
        let files = SegmentFiles(
            directory: directory.url, firstSegmentBytes: first, maxSegmentBytes: 4 * first, keepsSpare: true)
        var writer = SegmentWriter(files: files, tail: try files.scanAll { _, _ in })
        _ = try writer.append(SegmentRecord.encode([Self.entry(1, payloadBytes: first / 2)]))
        files.waitForSpare()
        let capacity = files.plannedCapacity(of: 1)
        #expect(capacity == SpareSegment.chunkBytes + SpareSegment.chunkBytes / 2)
        #expect(files.spareCapacity == capacity)
        #expect(try Self.contents(try #require(files.sparePath)) == Data(count: capacity))
    }

    @Test("a record larger than the spare gets a segment of its own size, and the spare waits for the next segment")
    func recordLargerThanTheSpare() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let files = SegmentFiles(
            directory: directory.url, firstSegmentBytes: 4096, maxSegmentBytes: 4096, keepsSpare: true)
        var writer = SegmentWriter(files: files, tail: try files.scanAll { _, _ in })
        _ = try writer.append(SegmentRecord.encode([Self.entry(1, payloadBytes: 2500)]))
        files.waitForSpare()
        let spareInode = try Self.inode(try #require(files.sparePath))
        let placed = try writer.append(SegmentRecord.encode([Self.entry(2, payloadBytes: 6000)]))
        let segment = try #require(files.file(placed.segment))
        #expect(placed.segment == 1)
        #expect(segment.capacity > 4096)
        #expect(try Self.inode(segment.path) != spareInode)
        #expect(files.spareCapacity == 4096)
    }

    @Test("a spare a crash left behind, with anything in it, is deleted at open and never read as a segment")
    func leftoverSpareIsDeleted() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let leftover = directory.url.appendingPathComponent(SpareSegment.prefix + "0123abcd" + SpareSegment.suffix)
        // What looks like a record, and then garbage: neither may be read.
        var bytes = try SegmentRecord.encode([Self.entry(7)])
        bytes += [UInt8](repeating: 0xA5, count: 100)
        try Data(bytes).write(to: leftover)
        let files = SegmentFiles(
            directory: directory.url, firstSegmentBytes: 4096, maxSegmentBytes: 4096, keepsSpare: true)
        var seen: [LoggedEntry] = []
        let tail = try files.scanAll { entry, _ in seen.append(entry) }
        #expect(seen.isEmpty)
        #expect(tail.segment == nil)
        #expect(!FileManager.default.fileExists(atPath: leftover.path))
        #expect(files.sparePath != leftover.path)
    }

    @Test("a store whose every segment after the first was a spare reads all its envelopes after a reopen")
    func storeReopensAcrossSpares() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let payload = String(repeating: "x", count: 3000)
        do {
            let store = try SQLiteRelayStore(url: directory.storeURL, firstSegmentBytes: 4096, maxSegmentBytes: 4096)
            for index in 0..<5 {
                store.segments.waitForSpare()
                #expect(store.segments.spareCapacity == (index == 0 ? nil : 4096))
                _ = try await store.appendAll([request("group/a", payload + "\(index)")], serverTimeMilliseconds: 1)
            }
            #expect(store.segments.ids.count == 5)
            try await store.close()
        }
        let store = try SQLiteRelayStore(url: directory.storeURL, firstSegmentBytes: 4096, maxSegmentBytes: 4096)
        let page = try await store.fetch(topic: "group/a", after: 0, limit: 10, nowMilliseconds: 2)
        #expect(page.envelopes.map(\.payload) == (0..<5).map { Data((payload + "\($0)").utf8) })
        try await store.close()
    }

    /// `SEEK_HOLE`, which glibc's headers show only to `_GNU_SOURCE` code,
    /// so Swift's Glibc module lacks it.
    #if os(Linux)
        private static let seekHole: Int32 = 4
    #else
        private static let seekHole: Int32 = SEEK_HOLE
    #endif

    /// Whether this filesystem reports blocks `posix_fallocate` reserved and
    /// nothing wrote as a hole (ext4 and XFS do; tmpfs does not): only there
    /// can a test tell a reserved segment from one written full of zeros.
    private static let reservedBlocksAreHoles: Bool = {
        #if canImport(Glibc)
            guard let directory = try? TemporaryDirectory() else { return false }
            defer { directory.remove() }
            let descriptor = open(directory.url.appendingPathComponent("probe").path, O_RDWR | O_CREAT, 0o600)
            guard descriptor >= 0 else { return false }
            defer { close(descriptor) }
            guard posix_fallocate(descriptor, 0, 65_536) == 0, fsync(descriptor) == 0 else { return false }
            return lseek(descriptor, 0, seekHole) == 0
        #else
            return false
        #endif
    }()

    /// Where the first hole of the file at `path` starts: its size when
    /// every block of it was written.
    private static func firstHole(_ path: String) throws -> Int {
        let descriptor = open(path, O_RDONLY)
        guard descriptor >= 0 else { throw POSIXError(.ENOENT) }
        defer { close(descriptor) }
        return Int(lseek(descriptor, 0, seekHole))
    }

    @Test(
        "a store that keeps spares writes its first segment full of zeros, so no record's sync turns a reserved block into a written one; one without spares only reserves it",
        .enabled(if: reservedBlocksAreHoles, "the filesystem does not tell reserved blocks from written ones")
    )
    func firstSegmentIsWrittenFullOfZeros() throws {
        for keepsSpare in [true, false] {
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            let files = SegmentFiles(
                directory: directory.url, firstSegmentBytes: 65_536, maxSegmentBytes: 65_536, keepsSpare: keepsSpare)
            var writer = SegmentWriter(files: files, tail: try files.scanAll { _, _ in })
            let placed = try writer.append(SegmentRecord.encode([Self.entry(1, payloadBytes: 100)]))
            let segment = try #require(files.file(placed.segment))
            #expect(segment.id == 0 && segment.capacity == 65_536)
            // The record's own block is written either way; what follows it
            // is zeros on the disk only when the segment was written whole.
            #expect(try Self.firstHole(segment.path) == (keepsSpare ? 65_536 : 4096), "keepsSpare: \(keepsSpare)")
            var seen: [LoggedEntry] = []
            _ = try files.scanAll { entry, _ in seen.append(entry) }
            #expect(seen == [Self.entry(1, payloadBytes: 100)])
        }
    }
}
