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

    @Test(
        "opening an empty directory writes a spare of the first segment's size, all zeros; the first record's segment is that file, renamed, and the next spare is the next size"
    )
    func firstSegmentIsTheSpare() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let files = SegmentFiles(
            directory: directory.url, firstSegmentBytes: 4096, maxSegmentBytes: 16384, keepsSpare: true)
        let tail = try files.scanAll { _, _ in Issue.record("an empty directory has no entries") }
        files.waitForSpare()
        let sparePath = directory.url.appendingPathComponent(SpareSegment.name).path
        #expect(files.spareCapacity == 4096)
        #expect(try Self.contents(sparePath) == Data(count: 4096))
        let spareInode = try Self.inode(sparePath)

        var writer = SegmentWriter(files: files, tail: tail)
        let placed = try writer.append(SegmentRecord.encode([Self.entry(1)]))
        let segmentPath = directory.url.appendingPathComponent(SegmentFiles.name(of: placed.segment)).path
        #expect(placed.segment == 0)
        #expect(try Self.inode(segmentPath) == spareInode)
        #expect(try Self.contents(segmentPath).count == 4096)

        files.waitForSpare()
        #expect(files.spareCapacity == files.plannedCapacity(of: 1))
        #expect(files.plannedCapacity(of: 1) == 8192)
        #expect(try Self.inode(sparePath) != spareInode)
    }

    @Test("a record larger than the spare gets a segment of its own size, and the spare waits for the next segment")
    func recordLargerThanTheSpare() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let files = SegmentFiles(
            directory: directory.url, firstSegmentBytes: 4096, maxSegmentBytes: 4096, keepsSpare: true)
        var writer = SegmentWriter(files: files, tail: try files.scanAll { _, _ in })
        files.waitForSpare()
        let spareInode = try Self.inode(directory.url.appendingPathComponent(SpareSegment.name).path)
        let placed = try writer.append(SegmentRecord.encode([Self.entry(1, payloadBytes: 6000)]))
        let segment = try #require(files.file(placed.segment))
        #expect(segment.capacity > 4096)
        #expect(try Self.inode(segment.path) != spareInode)
        #expect(files.spareCapacity == 4096)
    }

    @Test(
        "a spare a crash left with anything in it is discarded at open, never read as a segment, and written again as zeros"
    )
    func leftoverSpareIsDiscarded() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let sparePath = directory.url.appendingPathComponent(SpareSegment.name).path
        // What looks like a record, and then garbage: neither may be read.
        var leftover = try SegmentRecord.encode([Self.entry(7)])
        leftover += [UInt8](repeating: 0xA5, count: 100)
        try Data(leftover).write(to: URL(fileURLWithPath: sparePath))
        let files = SegmentFiles(
            directory: directory.url, firstSegmentBytes: 4096, maxSegmentBytes: 4096, keepsSpare: true)
        var seen: [LoggedEntry] = []
        let tail = try files.scanAll { entry, _ in seen.append(entry) }
        #expect(seen.isEmpty)
        #expect(tail.segment == nil)
        files.waitForSpare()
        #expect(try Self.contents(sparePath) == Data(count: 4096))
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
                #expect(store.segments.spareCapacity == 4096)
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
}
