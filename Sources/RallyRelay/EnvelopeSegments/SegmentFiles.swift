import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Where an entry is: its segment, its offset in it and its size.
struct SegmentLocation: Sendable, Hashable {
    var segment: UInt32
    var offset: UInt32
    var size: UInt32
}

/// A segment of the log that is damaged before its end: not a torn last
/// write, which only the newest segment can have, but bytes that were
/// synced and changed since. The store refuses to open rather than drop
/// envelopes it acknowledged.
public struct SegmentDamaged: Error, Equatable, CustomStringConvertible {
    public var path: String
    public var offset: Int
    public var reason: String

    public var description: String {
        "the relay's envelope segment \(path) is damaged at byte \(offset) (\(reason)): restore the data directory from a backup"
    }
}

/// A failed `fsync` leaves the kernel's page cache in a state no retry can
/// trust, so the writer stops: every later append fails with this until the
/// relay restarts and replays what reached the disk.
struct SegmentWriterStopped: Error, CustomStringConvertible {
    var cause: String
    var description: String { "the envelope log stopped after a failed sync (\(cause)); restart the relay" }
}

/// One segment file, open for reading for as long as anyone holds it: a
/// read that started before a segment was reclaimed finishes on the
/// unlinked file.
final class SegmentFile: Sendable {
    let id: UInt32
    let path: String
    let descriptor: Int32
    let capacity: Int

    fileprivate init(id: UInt32, path: String, descriptor: Int32, capacity: Int) {
        self.id = id
        self.path = path
        self.descriptor = descriptor
        self.capacity = capacity
    }

    deinit { close(descriptor) }

    func read(at location: SegmentLocation) throws -> [UInt8] {
        try SegmentFiles.read(descriptor, offset: Int(location.offset), count: Int(location.size), path: path)
    }
}

/// The directory of segment files (ADR 0030): numbered, preallocated, each
/// a run of records from its start. Only the newest is written; the others
/// are read and, once nothing in them is live, deleted.
///
/// With `keepsSpare`, once the newest segment is half full the next one is
/// written full of zeros, off the writer's path, and renamed into place
/// when the newest fills (ADR 0031). A segment that `posix_fallocate`
/// reserved is made of unwritten extents: the first record into each block
/// turns it into a written one, so the record's `fdatasync` also writes the
/// inode and waits for it, a second round trip to the disk. Blocks that
/// hold zeros already need no such change; under load (records of about
/// 16 KiB) that took a commit's sync from about 400 to about 270 µs.
final class SegmentFiles: Sendable {
    let directory: URL
    /// The first segment's size; each next one doubles up to
    /// `maxSegmentBytes`, so a small store stays small on disk.
    let firstSegmentBytes: Int
    let maxSegmentBytes: Int
    private let files = Mutex<[UInt32: SegmentFile]>([:])
    private let spare: SpareSegment?

    static let defaultFirstSegmentBytes = 1 << 20
    static let defaultMaxSegmentBytes = 64 << 20

    init(directory: URL, firstSegmentBytes: Int, maxSegmentBytes: Int, keepsSpare: Bool = false) {
        self.directory = directory
        self.firstSegmentBytes = firstSegmentBytes
        self.maxSegmentBytes = max(firstSegmentBytes, maxSegmentBytes)
        spare = keepsSpare ? SpareSegment(directory: directory) : nil
    }

    /// How big segment `id` is made: the first size, doubled per segment
    /// up to the largest.
    func plannedCapacity(of id: UInt32) -> Int {
        min(firstSegmentBytes << min(Int(id), 20), maxSegmentBytes)
    }

    /// Waits until no spare is being written: for tests, which then see
    /// the spare a segment will take.
    func waitForSpare() { spare?.waitUntilWritten() }

    /// The spare's size, once it is written and until a segment takes it.
    var spareCapacity: Int? { spare?.readyCapacity }

    /// Where the spare is written.
    var sparePath: String? { spare?.path }

    /// Starts writing the segment after `active` as a spare once `active`
    /// is half full: ahead of need by half a segment's worth of records,
    /// and never for a store too small to fill its first segment.
    func prepareSpare(after active: SegmentFile, tail: Int) {
        guard let spare, tail * 2 >= active.capacity else { return }
        spare.prepare(capacity: plannedCapacity(of: active.id + 1))
    }

    static func name(of id: UInt32) -> String { String(format: "%08x.segment", id) }

    private func path(of id: UInt32) -> String { directory.appendingPathComponent(Self.name(of: id)).path }

    func file(_ id: UInt32) -> SegmentFile? { files.withLock { $0[id] } }

    var ids: [UInt32] { files.withLock { $0.keys.sorted() } }

    // MARK: Opening

    /// Where the writer goes on: the newest segment (none in a new store)
    /// and the offset after its last record.
    struct Tail {
        var segment: SegmentFile?
        var offset: Int
    }

    /// Opens every segment in the directory and hands each entry of each
    /// record to `visit`, oldest first. A torn record at the end of the
    /// newest segment is zeroed and the writer starts there; anything else
    /// that is not a record before a segment's zeros is `SegmentDamaged`.
    func scanAll(_ visit: (LoggedEntry, SegmentLocation) throws -> Void) throws -> Tail {
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        var ids: [UInt32] = []
        for name in names where name.hasSuffix(".segment") {
            guard let id = UInt32(name.dropLast(".segment".count), radix: 16), Self.name(of: id) == name else {
                throw SegmentDamaged(
                    path: directory.appendingPathComponent(name).path, offset: 0, reason: "not a segment name")
            }
            ids.append(id)
        }
        ids.sort()
        // A spare is only ever zeros, and one cut short by a crash may not
        // be: it is written again when needed rather than trusted.
        for name in names where SpareSegment.isSpare(name) {
            unlink(directory.appendingPathComponent(name).path)
        }
        var tail = Tail(segment: nil, offset: 0)
        for id in ids {
            let path = path(of: id)
            let descriptor = open(path, O_RDWR | O_CLOEXEC)
            guard descriptor >= 0 else { throw Self.posixError(errno, "open", path) }
            var status = stat()
            guard fstat(descriptor, &status) == 0 else {
                let failure = errno
                close(descriptor)
                throw Self.posixError(failure, "fstat", path)
            }
            let file = SegmentFile(id: id, path: path, descriptor: descriptor, capacity: Int(status.st_size))
            files.withLock { $0[id] = file }
            let end = try scan(file, isNewest: id == ids.last, visit)
            tail = Tail(segment: file, offset: end)
        }
        return tail
    }

    /// The offset after the segment's last record.
    private func scan(
        _ file: SegmentFile, isNewest: Bool, _ visit: (LoggedEntry, SegmentLocation) throws -> Void
    ) throws -> Int {
        let contents = try Self.read(file.descriptor, offset: 0, count: file.capacity, path: file.path)
        var offset = 0
        let end: Int = try contents.withUnsafeBytes { bytes in
            while offset < bytes.count {
                let rest = UnsafeRawBufferPointer(rebasing: bytes[offset...])
                do {
                    let (entries, size) = try SegmentRecord.decode(rest)
                    for found in entries {
                        try visit(
                            found.entry,
                            SegmentLocation(
                                segment: file.id, offset: UInt32(offset + found.offset), size: UInt32(found.size)))
                    }
                    offset += size
                } catch {
                    guard isNewest else {
                        // An older segment ends in the zeros it was
                        // preallocated with; anything else is damage.
                        if rest.prefix(SegmentLimits.headerBytes).allSatisfy({ $0 == 0 }) { return offset }
                        throw SegmentDamaged(path: file.path, offset: offset, reason: "\(error)")
                    }
                    // What follows the last whole record of the newest
                    // segment is a write the crash cut short: it was never
                    // acknowledged.
                    try zeroTail(of: file, from: offset, rest)
                    return offset
                }
            }
            return offset
        }
        return end
    }

    /// Zeroes whatever a torn write left after the newest segment's last
    /// record, wherever its pages landed, so that the records written
    /// after it are never followed by its remains.
    private func zeroTail(of file: SegmentFile, from offset: Int, _ rest: UnsafeRawBufferPointer) throws {
        guard let last = rest.lastIndex(where: { $0 != 0 }) else { return }
        try Self.write([UInt8](repeating: 0, count: last + 1), to: file, at: offset)
        try Self.sync(file)
    }

    // MARK: Writing

    /// A new segment after `previous`, big enough for `bytes`: the spare
    /// when one is written and big enough, else preallocated here so that
    /// a sync after an append does not also commit the file's size.
    func create(after previous: SegmentFile?, holding bytes: Int) throws -> SegmentFile {
        let id = previous.map { $0.id + 1 } ?? 0
        let path = path(of: id)
        let file: SegmentFile
        if let spare, let taken = spare.take(atLeast: bytes) {
            file = SegmentFile(id: id, path: path, descriptor: taken.descriptor, capacity: taken.capacity)
            guard rename(spare.path, path) == 0 else {
                let failure = errno
                unlink(spare.path)
                throw Self.posixError(failure, "rename the spare segment to", path)
            }
        } else {
            let descriptor = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            guard descriptor >= 0 else { throw Self.posixError(errno, "create", path) }
            file = SegmentFile(
                id: id, path: path, descriptor: descriptor, capacity: max(plannedCapacity(of: id), bytes))
            do {
                // A store that keeps spares writes every segment full of
                // zeros (ADR 0031); the first has no spare before it, so it
                // is written here, once in the store's life. Later segments
                // made here, because a burst outran the spare, are only
                // preallocated: zeroing one would hold the commit waiting
                // for it.
                if spare != nil, previous == nil {
                    // Synced as it is written.
                    let failure = Self.writeZeros(to: descriptor, capacity: file.capacity)
                    guard failure == 0 else { throw Self.posixError(failure, "write zeros to", path) }
                } else {
                    try Self.preallocate(file)
                    try Self.sync(file)
                }
            } catch {
                unlink(path)
                throw error
            }
        }
        // The name is synced before any record in the file is acknowledged:
        // a crash must not leave them under another name, or none.
        do {
            try Self.syncDirectory(directory)
        } catch {
            unlink(path)
            throw error
        }
        files.withLock { $0[id] = file }
        return file
    }

    /// Deletes segments nothing refers to any more. The directory is synced
    /// before the caller forgets their removal marks.
    func delete(_ ids: [UInt32]) throws {
        guard !ids.isEmpty else { return }
        for id in ids {
            files.withLock { $0[id] = nil }
            if unlink(path(of: id)) != 0, errno != ENOENT { throw Self.posixError(errno, "unlink", path(of: id)) }
        }
        try Self.syncDirectory(directory)
    }

    static func write(_ bytes: [UInt8], to file: SegmentFile, at offset: Int) throws {
        let failure = bytes.withUnsafeBytes { write($0, to: file.descriptor, at: offset) }
        guard failure == 0 else { throw posixError(failure, "write", file.path) }
    }

    /// Writes all of `buffer` at `offset`, however `pwrite` splits it;
    /// the `errno` of a failed write, or 0.
    static func write(_ buffer: UnsafeRawBufferPointer, to descriptor: Int32, at offset: Int) -> Int32 {
        var done = 0
        while done < buffer.count {
            let written = pwrite(descriptor, buffer.baseAddress! + done, buffer.count - done, off_t(offset + done))
            if written < 0 {
                if errno == EINTR { continue }
                return errno
            }
            done += written
        }
        return 0
    }

    static func sync(_ file: SegmentFile) throws {
        guard sync(file.descriptor) == 0 else { throw posixError(errno, "sync", file.path) }
    }

    /// The data and what reading it needs (the size), on the disk itself.
    static func sync(_ descriptor: Int32) -> Int32 {
        #if canImport(Glibc)
            fdatasync(descriptor)
        #else
            fcntl(descriptor, F_FULLFSYNC)
        #endif
    }

    static func syncDirectory(_ directory: URL) throws {
        let descriptor = open(directory.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { throw posixError(errno, "open", directory.path) }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else { throw posixError(errno, "sync", directory.path) }
    }

    /// Writes `capacity` zeros from the start of the file, a chunk at a
    /// time, and syncs them: 0, or the `errno` of the write or sync that
    /// failed. Each chunk is synced before the next is written: a commit's
    /// `fdatasync` meanwhile then waits behind at most one chunk of zeros
    /// on its way to the disk, not a whole segment of them (ADR 0031).
    static func writeZeros(to descriptor: Int32, capacity: Int) -> Int32 {
        let zeros = [UInt8](repeating: 0, count: min(SpareSegment.chunkBytes, max(capacity, 1)))
        return zeros.withUnsafeBytes { zeros in
            for offset in stride(from: 0, to: capacity, by: zeros.count) {
                let chunk = UnsafeRawBufferPointer(rebasing: zeros[..<min(zeros.count, capacity - offset)])
                let failure = write(chunk, to: descriptor, at: offset)
                if failure != 0 { return failure }
                if sync(descriptor) != 0 { return errno }
            }
            return 0
        }
    }

    private static func preallocate(_ file: SegmentFile) throws {
        #if canImport(Glibc)
            let failure = posix_fallocate(file.descriptor, 0, off_t(file.capacity))
            guard failure == 0 else { throw posixError(failure, "preallocate", file.path) }
        #else
            guard ftruncate(file.descriptor, off_t(file.capacity)) == 0 else {
                throw posixError(errno, "preallocate", file.path)
            }
        #endif
    }

    fileprivate static func read(_ descriptor: Int32, offset: Int, count: Int, path: String) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var done = 0
        try bytes.withUnsafeMutableBytes { buffer in
            while done < count {
                let got = pread(descriptor, buffer.baseAddress! + done, count - done, off_t(offset + done))
                if got < 0 {
                    if errno == EINTR { continue }
                    throw posixError(errno, "read", path)
                }
                if got == 0 { break }
                done += got
            }
        }
        guard done == count else {
            throw SegmentDamaged(path: path, offset: offset + done, reason: "the file ends \(count - done) bytes early")
        }
        return bytes
    }

    static func posixError(_ code: Int32, _ action: String, _ path: String) -> any Error {
        NSError(
            domain: NSPOSIXErrorDomain, code: Int(code),
            userInfo: [NSLocalizedDescriptionKey: "cannot \(action) \(path): \(String(cString: strerror(code)))"])
    }
}

/// The next segment, written full of zeros on a queue of its own before
/// the writer needs it (ADR 0031). It lives under a name the scan of
/// segments does not read, and becomes a segment by a rename.
final class SpareSegment: Sendable {
    /// Each store's spare has a name of its own (`spare-<random>.zeros`): a
    /// store closed in this process may still be writing one while the
    /// same directory is opened again, and the two must not meet.
    static let prefix = "spare-"
    static let suffix = ".zeros"

    static func isSpare(_ name: String) -> Bool { name.hasPrefix(prefix) && name.hasSuffix(suffix) }

    /// Zeros are written this much at a time.
    static let chunkBytes = 1 << 20

    private enum State {
        case none
        case writing
        case ready(descriptor: Int32, capacity: Int)
    }

    let path: String
    private let state = Mutex(State.none)
    private let queue = DispatchQueue(label: "rally.relay.segments.spare", qos: .utility)

    init(directory: URL) {
        let tag = String(UInt64.random(in: .min ... .max), radix: 16)
        path = directory.appendingPathComponent(Self.prefix + tag + Self.suffix).path
    }

    // A spare being written holds this object until it is done.
    deinit {
        if case .ready(let descriptor, _) = state.withLock({ $0 }) { close(descriptor) }
    }

    var readyCapacity: Int? {
        state.withLock { state in
            if case .ready(_, let capacity) = state { return capacity }
            return nil
        }
    }

    /// Starts writing a spare of `capacity` bytes, unless one is written
    /// or being written.
    func prepare(capacity: Int) {
        let start = state.withLock { state -> Bool in
            guard case .none = state else { return false }
            state = .writing
            return true
        }
        guard start else { return }
        queue.async {
            let written = self.write(capacity: capacity)
            self.state.withLock { state in
                state = written.map { .ready(descriptor: $0, capacity: capacity) } ?? .none
            }
        }
    }

    /// The spare, if it is written and holds `bytes`; it is the caller's
    /// from then on, and nothing else writes it.
    func take(atLeast bytes: Int) -> (descriptor: Int32, capacity: Int)? {
        state.withLock { state in
            guard case .ready(let descriptor, let capacity) = state, capacity >= bytes else { return nil }
            state = .none
            return (descriptor, capacity)
        }
    }

    func waitUntilWritten() { queue.sync {} }

    /// Writes the zeros and syncs them; nil when the disk refused (the
    /// writer then preallocates its segment itself, as without a spare).
    private func write(capacity: Int) -> Int32? {
        // The name is this store's alone, and every path that gives the
        // file up renames or removes it: nothing is there to replace.
        let descriptor = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { return nil }
        guard SegmentFiles.writeZeros(to: descriptor, capacity: capacity) == 0 else {
            close(descriptor)
            unlink(path)
            return nil
        }
        return descriptor
    }
}

/// The one writer of the newest segment. A record is one `pwrite` into the
/// preallocated file and one `fdatasync` (ADR 0030); the batch is
/// acknowledged only after both.
struct SegmentWriter: ~Copyable {
    let files: SegmentFiles
    private var active: SegmentFile?
    private var tail: Int
    private var stopped: String?
    /// Bytes after the tail a failed write may have left: zeroed before
    /// the next record, so that no segment the writer leaves behind holds
    /// anything but records and zeros after them.
    private var leftover = 0

    init(files: SegmentFiles, tail: SegmentFiles.Tail) {
        self.files = files
        active = tail.segment
        self.tail = tail.offset
        if let active { files.prepareSpare(after: active, tail: self.tail) }
    }

    var activeSegment: UInt32? { active?.id }

    /// Writes a record and syncs it; returns where it starts. A failed
    /// write leaves the tail where it was, and what it wrote is zeroed
    /// before the next record; a failed sync stops the writer.
    mutating func append(_ record: [UInt8]) throws -> (segment: UInt32, offset: Int) {
        if let stopped { throw SegmentWriterStopped(cause: stopped) }
        if let active, leftover > 0 {
            try SegmentFiles.write(
                [UInt8](repeating: 0, count: min(leftover, active.capacity - tail)), to: active, at: tail)
            try sync(active)
            leftover = 0
        }
        var file: SegmentFile
        if let active, tail + record.count <= active.capacity {
            file = active
        } else {
            file = try files.create(after: active, holding: record.count)
            active = file
            tail = 0
        }
        do {
            try SegmentFiles.write(record, to: file, at: tail)
        } catch {
            leftover = record.count
            throw error
        }
        try sync(file)
        let offset = tail
        tail += record.count
        files.prepareSpare(after: file, tail: tail)
        return (file.id, offset)
    }

    private mutating func sync(_ file: SegmentFile) throws {
        do {
            try SegmentFiles.sync(file)
        } catch {
            stopped = "\(error)"
            throw error
        }
    }
}
