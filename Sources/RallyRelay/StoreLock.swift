import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A second relay process on a SQLite store that is already open.
public struct StoreInUse: Error, Equatable, CustomStringConvertible {
    public var path: String

    public var description: String {
        "another relay is using \(path): stop it, or give this relay a data directory of its own (--data)"
    }
}

/// One process per SQLite store. The store keeps its envelopes' index in
/// memory (ADR 0029), so a second process appending to the same file would
/// give out seqs the first has already given. An advisory `flock` on a file
/// beside the database: the kernel drops it when the process dies, however
/// it dies, so a crash never leaves the store locked.
final class StoreLock: Sendable {
    private let descriptor: Mutex<Int32>

    init(beside database: URL) throws {
        let path = database.path + ".lock"
        let opened = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard opened >= 0 else { throw CocoaError(.fileWriteNoPermission, userInfo: [NSFilePathErrorKey: path]) }
        guard flock(opened, LOCK_EX | LOCK_NB) == 0 else {
            let failure = errno
            close(opened)
            if failure == EWOULDBLOCK { throw StoreInUse(path: database.path) }
            throw POSIXError(POSIXErrorCode(rawValue: failure) ?? .EIO)
        }
        descriptor = Mutex(opened)
    }

    /// Idempotent: the store releases it when it closes, and again when it
    /// goes away.
    func release() {
        let held = descriptor.withLock { held in
            defer { held = -1 }
            return held
        }
        if held >= 0 { close(held) }
    }

    deinit { release() }
}
