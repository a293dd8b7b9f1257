public import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Why a shared container could not be used. Nothing was changed when one
/// of these is thrown.
public enum SharedContainerError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The suite name is not `group.` followed by a reverse-DNS app id.
    case invalidSuiteName(String, reason: String)
    /// The container's directory or files cannot be created, opened,
    /// locked, written or replaced.
    case unavailable(path: String, reason: String)
    /// The suite file is not a JSON object of strings.
    case corrupt(path: String, reason: String)
    /// The suite file is larger than ``SharedContainer/maximumFileSize``.
    case tooLarge(path: String, bytes: Int, limit: Int)
    /// A write would make the suite file larger than
    /// ``SharedContainer/maximumFileSize``.
    case valuesTooLarge(path: String, bytes: Int, limit: Int)

    public var description: String {
        switch self {
        case .invalidSuiteName(let name, let reason):
            let shown = name.count > 80 ? String(name.prefix(80)) + "…" : name
            return "\"\(shown)\" is not a shared container suite name: \(reason); "
                + "use group.<app id>, such as group.\(SharedContainer.defaultAppID)"
        case .unavailable(let path, let reason):
            return "cannot use the shared container \(path): \(reason)"
        case .corrupt(let path, let reason):
            return "the shared container \(path) is damaged (\(reason)); nothing was read or changed. "
                + "Remove the file, or reset the container, to start it empty"
        case .tooLarge(let path, let bytes, let limit):
            return "the shared container \(path) holds \(bytes) bytes, more than the \(limit) it may hold; "
                + "nothing was read or changed. Remove the file, or reset the container, to start it empty"
        case .valuesTooLarge(let path, let bytes, let limit):
            return "these values would make the shared container \(path) \(bytes) bytes, more than the \(limit) "
                + "it may hold; nothing was written. Store less, or remove keys that are no longer needed"
        }
    }
}

/// A small key–value store that an app and its extensions (separate
/// processes) share, like an App Group's `UserDefaults(suiteName:)`: the
/// suite `group.<app id>` is one file, `<directory>/<suite>.json`, a JSON
/// object of strings with sorted keys.
///
/// Safe across processes and threads: every operation takes a `flock` on
/// the sibling file `<suite>.lock` (shared to read, exclusive to change)
/// through a descriptor of its own, so two processes, or two threads of one
/// process, exclude each other alike. A change is written to a temporary
/// file in the same directory, flushed to disk and renamed over the suite
/// file, so a reader sees the old values or the new ones, never a part.
/// ``take(keys:)`` reads and removes under one exclusive lock: of two
/// processes taking at once, exactly one gets the values.
///
/// The directory is created owner-only (0700) when missing; the suite and
/// lock files are owner-only (0600). A damaged or oversized suite file is
/// reported (``SharedContainerError``) and left as it is, by reads and
/// writes alike; only ``reset()`` replaces it.
public struct SharedContainer: Sendable {
    /// The longest suite name: the suite's files (`<suite>.json`, and the
    /// temporary `.<suite>.<random>.tmp`) must fit a file name's 255 bytes.
    public static let maximumSuiteNameLength = 200
    /// The largest suite file read or written, in bytes.
    public static let maximumFileSize = 64 * 1024
    /// The app id of Rally's own suite, `group.app.rally`.
    public static let defaultAppID = "app.rally"
    static let suitePrefix = "group."

    public let suiteName: String
    public let directory: URL

    /// The suite file, `<directory>/<suite>.json`.
    public var fileURL: URL { directory.appendingPathComponent(suiteName + ".json") }
    /// The file every operation locks, `<directory>/<suite>.lock`.
    public var lockURL: URL { directory.appendingPathComponent(suiteName + ".lock") }

    /// A container for the suite `suiteName` in `directory`. Nothing is
    /// created until the first write.
    public init(suiteName: String, directory: URL) throws(SharedContainerError) {
        try Self.validate(suiteName: suiteName)
        self.suiteName = suiteName
        self.directory = directory
    }

    /// Where the CLI (and an app without App Groups) keeps the suite of
    /// `appID`: `<home>/shared/group.<appID>.json`.
    public static func `default`(
        home: URL, appID: String = defaultAppID
    ) throws(SharedContainerError)
        -> SharedContainer
    {
        try SharedContainer(suiteName: suitePrefix + appID, directory: home.appendingPathComponent("shared"))
    }

    /// Checks that `suiteName` is `group.` followed by a reverse-DNS app id
    /// (two or more labels of ASCII letters, digits and `-`, separated by
    /// `.`), at most ``maximumSuiteNameLength`` bytes long.
    public static func validate(suiteName: String) throws(SharedContainerError) {
        func invalid(_ reason: String) -> SharedContainerError { .invalidSuiteName(suiteName, reason: reason) }
        guard !suiteName.isEmpty else { throw invalid("it is empty") }
        let length = suiteName.utf8.count
        guard length <= maximumSuiteNameLength else {
            throw invalid("it is \(length) bytes long, more than \(maximumSuiteNameLength)")
        }
        guard suiteName.hasPrefix(suitePrefix) else { throw invalid("it does not start with \"\(suitePrefix)\"") }
        let appID = suiteName.dropFirst(suitePrefix.count)
        guard !appID.isEmpty else { throw invalid("the app id after \"\(suitePrefix)\" is empty") }
        if let bad = appID.unicodeScalars.first(where: { !isAppIDScalar($0) }) {
            let shown = bad.properties.isWhitespace || bad.value < 0x20 ? bad.escaped(asASCII: true) : String(bad)
            throw invalid(
                "it contains \"\(shown)\"; an app id holds only ASCII letters, digits, \"-\" and \".\"")
        }
        let labels = appID.split(separator: ".", omittingEmptySubsequences: false)
        guard !labels.contains(where: \.isEmpty) else {
            throw invalid("the app id \"\(appID)\" has an empty label (a leading, trailing or doubled \".\")")
        }
        guard labels.count >= 2 else {
            throw invalid("the app id \"\(appID)\" is not reverse-DNS, like app.rally or com.example.app")
        }
    }

    private static func isAppIDScalar(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar {
        case "a"..."z", "A"..."Z", "0"..."9", "-", ".": true
        default: false
        }
    }

    // MARK: Reading and writing

    /// The value stored for `key`, or nil.
    public func value(forKey key: String) throws(SharedContainerError) -> String? {
        try values(forKeys: [key])[key]
    }

    /// The values stored for those of `keys` that have one, read at once.
    public func values(forKeys keys: [String]) throws(SharedContainerError) -> [String: String] {
        guard FileManager.default.fileExists(atPath: directory.path) else { return [:] }
        return try locked(exclusive: false) { () throws(SharedContainerError) in
            try load().filter { keys.contains($0.key) }
        }
    }

    /// Stores `value` for `key`; nil removes the key.
    public func set(_ value: String?, forKey key: String) throws(SharedContainerError) {
        try update { $0[key] = value }
    }

    /// Stores several values in one write: a reader sees all of them or
    /// none.
    public func setValues(_ values: [String: String]) throws(SharedContainerError) {
        try update { $0.merge(values) { _, new in new } }
    }

    /// Reads and removes the values of `keys` under one exclusive lock:
    /// whoever takes them first gets them, everyone after gets none.
    public func take(keys: [String]) throws(SharedContainerError) -> [String: String] {
        // Nothing was ever written: nothing to take, and nothing to create.
        guard FileManager.default.fileExists(atPath: directory.path) else { return [:] }
        var taken: [String: String] = [:]
        try update { stored in
            for key in keys {
                if let value = stored.removeValue(forKey: key) { taken[key] = value }
            }
        }
        return taken
    }

    /// Empties the suite, whatever its file holds (the way back from
    /// ``SharedContainerError/corrupt(path:reason:)`` and
    /// ``SharedContainerError/tooLarge(path:bytes:limit:)``).
    public func reset() throws(SharedContainerError) {
        try prepareDirectory()
        try locked(exclusive: true) { () throws(SharedContainerError) in try store([:]) }
    }

    /// Reads, changes and (if anything changed) writes the suite under one
    /// exclusive lock.
    private func update(_ change: (inout [String: String]) -> Void) throws(SharedContainerError) {
        try prepareDirectory()
        try locked(exclusive: true) { () throws(SharedContainerError) in
            let stored = try load()
            var changed = stored
            change(&changed)
            if changed != stored { try store(changed) }
        }
    }

    // MARK: Files

    private static var lastError: String { String(cString: strerror(errno)) }

    /// Makes the directory exist owner-only (0700), as the home's own
    /// directories are (``OwnerOnly``).
    private func prepareDirectory() throws(SharedContainerError) {
        do {
            try OwnerOnly.prepareDirectory(directory)
        } catch {
            switch error {
            case .unavailable(let path, let reason): throw .unavailable(path: path, reason: reason)
            default: throw .unavailable(path: directory.path, reason: error.description)
            }
        }
    }

    /// Runs `body` holding a `flock` on the lock file, through a descriptor
    /// opened for this call alone (so threads of one process exclude each
    /// other too).
    private func locked<T>(
        exclusive: Bool, _ body: () throws(SharedContainerError) -> T
    )
        throws(SharedContainerError) -> T
    {
        let path = lockURL.path
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw .unavailable(path: path, reason: "cannot open the lock file: \(Self.lastError)") }
        defer { close(fd) }  // closing the descriptor releases the lock
        guard fchmod(fd, 0o600) == 0 else {
            throw .unavailable(path: path, reason: "cannot make the lock file owner-only: \(Self.lastError)")
        }
        while flock(fd, exclusive ? LOCK_EX : LOCK_SH) != 0 {
            guard errno == EINTR else { throw .unavailable(path: path, reason: "cannot lock: \(Self.lastError)") }
        }
        return try body()
    }

    /// The suite's values; empty when its file does not exist yet.
    private func load() throws(SharedContainerError) -> [String: String] {
        let path = fileURL.path
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else {
            if errno == ENOENT { return [:] }
            throw .unavailable(path: path, reason: "cannot open: \(Self.lastError)")
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw .unavailable(path: path, reason: Self.lastError) }
        guard info.st_mode & S_IFMT == S_IFREG else { throw .corrupt(path: path, reason: "not a regular file") }
        let limit = Self.maximumFileSize
        guard info.st_size <= limit else { throw .tooLarge(path: path, bytes: Int(info.st_size), limit: limit) }
        var data = Data(count: limit + 1)
        var count = 0
        while count <= limit {
            let got = data.withUnsafeMutableBytes { read(fd, $0.baseAddress! + count, limit + 1 - count) }
            if got < 0 {
                if errno == EINTR { continue }
                throw .unavailable(path: path, reason: "cannot read: \(Self.lastError)")
            }
            if got == 0 { break }
            count += got
        }
        guard count <= limit else { throw .tooLarge(path: path, bytes: count, limit: limit) }
        do {
            return try JSONDecoder().decode([String: String].self, from: data.prefix(count))
        } catch {
            throw .corrupt(path: path, reason: "not a JSON object of strings")
        }
    }

    /// Replaces the suite file with `values`: written to a temporary file
    /// in the same directory, flushed, then renamed over it.
    private func store(_ values: [String: String]) throws(SharedContainerError) {
        let path = fileURL.path
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data: Data
        do {
            data = try encoder.encode(values)
        } catch {
            throw .unavailable(path: path, reason: "cannot encode the values: \(error)")
        }
        guard data.count <= Self.maximumFileSize else {
            throw .valuesTooLarge(path: path, bytes: data.count, limit: Self.maximumFileSize)
        }
        let random = String(UInt64.random(in: .min ... .max), radix: 16)
        let temporary = directory.appendingPathComponent(".\(suiteName).\(random).tmp").path
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else {
            throw .unavailable(path: temporary, reason: "cannot create a temporary file: \(Self.lastError)")
        }
        var failure: String?
        if fchmod(fd, 0o600) != 0 {
            failure = "cannot make the temporary file owner-only: \(Self.lastError)"
        } else if let error = Self.writeAll(data, to: fd) {
            failure = "cannot write the temporary file: \(error)"
        } else if fsync(fd) != 0 {
            failure = "cannot flush the temporary file to disk: \(Self.lastError)"
        }
        if close(fd) != 0, failure == nil { failure = "cannot close the temporary file: \(Self.lastError)" }
        if failure == nil, rename(temporary, path) != 0 {
            failure = "cannot replace the file: \(Self.lastError)"
        }
        if let failure {
            unlink(temporary)
            throw .unavailable(path: path, reason: failure)
        }
        // Makes the rename itself durable; the data is safe either way.
        let directoryFD = open(directory.path, O_RDONLY | O_CLOEXEC | O_DIRECTORY)
        if directoryFD >= 0 {
            _ = fsync(directoryFD)
            close(directoryFD)
        }
    }

    /// Writes all of `data`; the error text when that fails.
    private static func writeAll(_ data: Data, to fd: Int32) -> String? {
        data.withUnsafeBytes { buffer -> String? in
            var offset = 0
            while offset < buffer.count {
                let written = write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    return lastError
                }
                offset += written
            }
            return nil
        }
    }
}
