import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Why the publish log's files could not be used.
public enum PublishLogError: Error, Equatable, CustomStringConvertible {
    /// Another process (or another store in this one) has the log open.
    case inUse(path: String)
    case io(operation: String, path: String, errno: Int32)
    /// A record the log must hold is missing: something other than a
    /// write cut short damaged the files. The relay refuses to start rather
    /// than lose acknowledged publishes silently.
    case damaged(path: String, expected: UInt64, found: UInt64?)
    /// A write or fsync failed earlier: what reached the disk is unknown, so
    /// the store takes no more publishes until the relay restarts and
    /// recovers from the files.
    case failed

    public var description: String {
        switch self {
        case .inUse(let path):
            "another relay process is using \(path); stop it, or give this relay its own --data directory"
        case .io(let operation, let path, let code):
            "\(operation) \(path) failed: \(String(cString: strerror(code)))"
        case .damaged(let path, let expected, let found):
            "the publish log at \(path) is damaged: record \(expected) is missing"
                + (found.map { " (the next one found is \($0))" } ?? "")
        case .failed: "an earlier write to the publish log failed; restart the relay to recover from it"
        }
    }
}

/// The publish log's two files, written in turn (ADR 0028). A record is
/// acknowledged once `write` returns: after its `fdatasync`. A file is
/// written from its start again only when SQLite holds every record it has.
/// Both are preallocated with zeros, so an `fdatasync` only writes data:
/// a file that grows makes every sync update its size too, which measured
/// 1.4 to 2 times slower here (ADR 0028).
///
/// Confined to the store's writer queue (and its initializer), which is why
/// it is a class with no locks.
final class PublishLogFiles {
    let paths: [String]
    let capacity: Int
    private var descriptors: [Int32]
    private var active = 0
    private var offset = 0
    /// The last record each file holds that SQLite may not have yet.
    private var lastNumber: [UInt64] = [0, 0]

    /// Opens (creating and preallocating) the files beside the store at
    /// `storePath`, and takes the lock that keeps a second relay out.
    init(storePath: String, capacity: Int) throws {
        paths = [storePath + "-log.0", storePath + "-log.1"]
        self.capacity = max(capacity, 4096)
        var descriptors: [Int32] = []
        do {
            for path in paths {
                let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
                guard descriptor >= 0 else { throw PublishLogError.io(operation: "open", path: path, errno: errno) }
                descriptors.append(descriptor)
            }
            guard flock(descriptors[0], LOCK_EX | LOCK_NB) == 0 else {
                throw errno == EWOULDBLOCK
                    ? PublishLogError.inUse(path: paths[0])
                    : PublishLogError.io(operation: "lock", path: paths[0], errno: errno)
            }
            for (descriptor, path) in zip(descriptors, paths) {
                try Self.preallocate(descriptor, path: path, bytes: self.capacity)
            }
        } catch {
            for descriptor in descriptors { close(descriptor) }
            throw error
        }
        self.descriptors = descriptors
    }

    /// Writes zeros up to `bytes` once, so later writes overwrite in place.
    private static func preallocate(_ descriptor: Int32, path: String, bytes: Int) throws {
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            throw PublishLogError.io(operation: "stat", path: path, errno: errno)
        }
        let size = Int(status.st_size)
        guard size < bytes else { return }
        let zeros = [UInt8](repeating: 0, count: min(1 << 20, bytes - size))
        var at = size
        while at < bytes {
            let count = min(zeros.count, bytes - at)
            try zeros.withUnsafeBytes {
                try writeFully(descriptor, UnsafeRawBufferPointer(rebasing: $0[0..<count]), at: at, path: path)
            }
            at += count
        }
        guard fsync(descriptor) == 0 else { throw PublishLogError.io(operation: "fsync", path: path, errno: errno) }
    }

    /// Every record after `applied` the files hold, in order: from each
    /// file its run of consecutive records from the start, cut at the first
    /// bytes that are not a whole record (a write cut short, or what an
    /// older run left). Throws when the runs leave a gap after `applied`.
    func recover(after applied: UInt64) throws -> [PublishLogRecord] {
        var found: [PublishLogRecord] = []
        for (descriptor, path) in zip(descriptors, paths) {
            found += try Self.run(in: Self.readAll(descriptor, path: path)).filter { $0.number > applied }
        }
        found.sort { $0.number < $1.number }
        var expected = applied + 1
        for record in found {
            guard record.number == expected else {
                throw PublishLogError.damaged(path: paths[0], expected: expected, found: record.number)
            }
            expected += 1
        }
        return found
    }

    /// The consecutive records at the start of `bytes`.
    static func run(in bytes: [UInt8]) -> [PublishLogRecord] {
        bytes.withUnsafeBytes { buffer in
            var records: [PublishLogRecord] = []
            var at = 0
            while let (record, size) = try? PublishLogRecord.decode(UnsafeRawBufferPointer(rebasing: buffer[at...])),
                records.last.map({ $0.number + 1 == record.number }) ?? true
            {
                records.append(record)
                at += size
            }
            return records
        }
    }

    private static func readAll(_ descriptor: Int32, path: String) throws -> [UInt8] {
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            throw PublishLogError.io(operation: "stat", path: path, errno: errno)
        }
        var bytes = [UInt8](repeating: 0, count: Int(status.st_size))
        let read = bytes.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, 0) }
        guard read >= 0 else { throw PublishLogError.io(operation: "read", path: path, errno: errno) }
        return Array(bytes.prefix(read))
    }

    /// Appends a record and syncs it. When the active file has no room, the
    /// other one takes over once `waitUntilSynced` has seen SQLite hold
    /// everything that file holds durably. A record larger than a whole file
    /// is written anyway and grows it.
    func write(
        _ record: [UInt8], number: UInt64, waitUntilSynced: (UInt64) throws -> Void
    ) throws {
        if offset > 0, offset + record.count > capacity {
            let other = 1 - active
            try waitUntilSynced(lastNumber[other])
            active = other
            offset = 0
        }
        let descriptor = descriptors[active]
        try record.withUnsafeBytes { try Self.writeFully(descriptor, $0, at: offset, path: paths[active]) }
        guard fdatasync(descriptor) == 0 else {
            throw PublishLogError.io(operation: "fdatasync", path: paths[active], errno: errno)
        }
        offset += record.count
        lastNumber[active] = number
    }

    private static func writeFully(
        _ descriptor: Int32, _ bytes: UnsafeRawBufferPointer, at start: Int, path: String
    ) throws {
        var written = 0
        while written < bytes.count {
            let count = pwrite(
                descriptor, bytes.baseAddress! + written, bytes.count - written, off_t(start + written))
            if count < 0 {
                if errno == EINTR { continue }
                throw PublishLogError.io(operation: "write", path: path, errno: errno)
            }
            written += count
        }
    }

    /// Closes the files, which releases the lock.
    func release() {
        for descriptor in descriptors { close(descriptor) }
        descriptors = []
    }
}
