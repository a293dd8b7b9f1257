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
///
/// A lock just released can still be held for a moment: a `flock` belongs
/// to the open file, and a child this process is spawning shares the
/// descriptor from its fork until its exec closes it (`O_CLOEXEC`). A store
/// closed and opened again while another thread spawns a process (the full
/// test suite does, and an app embedding the relay may) then met its own
/// lock. So a contended lock is tried again for up to ``contendedWait``
/// before the open fails with `StoreInUse`.
final class StoreLock: Sendable {
    private let descriptor: Mutex<Int32>

    /// Far longer than a spawn's fork-to-exec; short enough that a second
    /// relay on the same data directory says so at once.
    static let contendedWait: Duration = .seconds(1)
    static let retryInterval: Duration = .milliseconds(5)

    /// `whileContended` runs each time the lock is found held (tests
    /// release a holder of their own there).
    init(beside database: URL, whileContended: () -> Void = {}) throws {
        let path = database.path + ".lock"
        let opened = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard opened >= 0 else { throw CocoaError(.fileWriteNoPermission, userInfo: [NSFilePathErrorKey: path]) }
        let clock = ContinuousClock()
        let deadline = clock.now + Self.contendedWait
        while flock(opened, LOCK_EX | LOCK_NB) != 0 {
            let failure = errno
            if failure == EINTR { continue }
            guard failure == EWOULDBLOCK, clock.now < deadline else {
                close(opened)
                if failure == EWOULDBLOCK { throw StoreInUse(path: database.path) }
                throw POSIXError(POSIXErrorCode(rawValue: failure) ?? .EIO)
            }
            whileContended()
            Thread.sleep(forTimeInterval: Self.retryInterval.timeInterval)
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
