import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Owner-only directories and files for keys at rest, whatever the umask.
enum OwnerOnly {
    /// Makes `directory` exist as a directory only its owner can open
    /// (0700): created so, or tightened if it is laxer. A directory owned by
    /// another user is refused: its owner could read the keys.
    static func prepareDirectory(_ directory: URL) throws(LocalStoreError) {
        let path = directory.path
        var info = stat()
        if stat(path, &info) != 0 {
            guard errno == ENOENT else { throw .unavailable(path: path, reason: String(cString: strerror(errno))) }
            do {
                try FileManager.default.createDirectory(
                    at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw .unavailable(path: path, reason: "\(error)")
            }
            guard stat(path, &info) == 0 else {
                throw .unavailable(path: path, reason: String(cString: strerror(errno)))
            }
        }
        guard info.st_mode & S_IFMT == S_IFDIR else {
            throw .unavailable(path: path, reason: "it is not a directory")
        }
        let me = geteuid()
        guard info.st_uid == me else {
            throw .unavailable(
                path: path,
                reason: """
                    it belongs to user id \(info.st_uid), not to you (user id \(me)); a home holds private keys and \
                    must be a directory of your own: use another --home
                    """)
        }
        if info.st_mode & 0o077 != 0 {
            guard chmod(path, 0o700) == 0 else {
                throw .unavailable(
                    path: path,
                    reason:
                        "it is open to other users and cannot be made owner-only: \(String(cString: strerror(errno)))"
                )
            }
        }
    }

    /// Creates `path` as an empty owner-only file if it does not exist, and
    /// makes it owner-only (0600) if it does.
    static func createFile(_ path: String) throws(LocalStoreError) {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else {
            throw .unavailable(path: path, reason: "cannot create: \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        guard fchmod(fd, 0o600) == 0 else {
            throw .unavailable(path: path, reason: "cannot make owner-only: \(String(cString: strerror(errno)))")
        }
    }

    /// Makes the store's files in `directory` (`rally.sqlite` and SQLite's
    /// `-wal`, `-shm` and `-journal` files beside it) owner-only. Other
    /// files are left alone: a home may be a directory the user also keeps
    /// other things in.
    static func tightenFiles(in directory: URL, database: String) throws(LocalStoreError) {
        for name in ["", "-wal", "-shm", "-journal"].map({ database + $0 }) {
            let path = directory.appendingPathComponent(name).path
            var info = stat()
            guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_mode & 0o077 != 0 else {
                continue
            }
            guard chmod(path, 0o600) == 0 else {
                throw .unavailable(
                    path: path, reason: "cannot make owner-only: \(String(cString: strerror(errno)))")
            }
        }
    }
}
