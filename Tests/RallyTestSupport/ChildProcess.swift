public import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A child process started with `posix_spawn`, for tests that run the
/// `rally` binary and other tools.
///
/// Not Foundation's `Process`: on Linux its `run()` reads `/proc/self/fd`
/// with a dirent copy that can read past glibc's buffer and crash the test
/// process (swift-corelibs-foundation PR #5472, in Swift 6.3.1), more often
/// the more descriptors are open — and these tests hold many sockets.
/// Here every pipe end is close-on-exec in the parent, the child gets only
/// its stdin/stdout/stderr, and descriptors from 3 up are closed in the
/// child where the C library can (`posix_spawn_file_actions_addclosefrom_np`,
/// glibc 2.34+; `POSIX_SPAWN_CLOEXEC_DEFAULT` on Apple platforms).
public final class ChildProcess: Sendable {
    /// Where one of the child's standard streams goes.
    public enum Stream: Sendable {
        /// A pipe the test reads (or, for stdin, writes).
        case pipe
        /// `/dev/null`.
        case null
        /// Copied to the test process's own stream (stdout and stderr
        /// only). Through a pipe and a thread, never the descriptor itself:
        /// a child that outlived a crashed test process would otherwise
        /// hold the test run's output open, and whatever reads it (swift
        /// test, CI) would wait for it forever.
        case inherit
    }

    public struct LaunchError: Error, CustomStringConvertible {
        public let executable: String
        public let errno: Int32
        public var description: String { "cannot start \(executable): \(String(cString: strerror(errno)))" }
    }

    public let pid: pid_t
    /// The read end of the child's stdout (with `.pipe`).
    public let standardOutput: FileHandle?
    /// The read end of the child's stderr (with `.pipe`).
    public let standardError: FileHandle?
    /// The write end of the child's stdin (with `.pipe`).
    public let standardInput: FileHandle?
    private let exit = ExitStatus()

    private init(pid: pid_t, stdout: FileHandle?, stderr: FileHandle?, stdin: FileHandle?) {
        self.pid = pid
        self.standardOutput = stdout
        self.standardError = stderr
        self.standardInput = stdin
    }

    /// A child still running when its last handle goes (a test that threw
    /// before stopping it) is killed: left running, it would outlive the
    /// test process and hold the test run's output open. Callers keep the
    /// handle until they have stopped the child.
    deinit {
        exit.ifRunning { kill(pid, SIGKILL) }
    }

    /// Starts `executable` with `arguments` and `environment` (nil: this
    /// process's environment).
    public static func launch(
        _ executable: URL, _ arguments: [String], environment: [String: String]? = nil, stdout: Stream = .pipe,
        stderr: Stream = .pipe, stdin: Stream = .null
    ) throws -> ChildProcess {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }

        var parentEnds: [Int32] = []
        var childEnds: [Int32] = []
        defer { for fd in childEnds { close(fd) } }
        func wire(_ stream: Stream, to target: Int32, childReads: Bool) throws -> FileHandle? {
            switch stream {
            case .inherit where target == 0:
                return nil
            case .inherit:
                var fds: [Int32] = [0, 0]
                guard pipeCloseOnExec(&fds) == 0 else {
                    throw LaunchError(executable: executable.path, errno: errno)
                }
                childEnds.append(fds[1])
                posix_spawn_file_actions_adddup2(&actions, fds[1], target)
                let source = FileHandle(fileDescriptor: fds[0], closeOnDealloc: true)
                let destination = target == 1 ? FileHandle.standardOutput : FileHandle.standardError
                Thread.detachNewThread {
                    while case let chunk = source.availableData, !chunk.isEmpty {
                        try? destination.write(contentsOf: chunk)
                    }
                }
                return nil
            case .null:
                posix_spawn_file_actions_addopen(
                    &actions, target, "/dev/null", childReads ? O_RDONLY : O_WRONLY, 0)
                return nil
            case .pipe:
                var fds: [Int32] = [0, 0]
                guard pipeCloseOnExec(&fds) == 0 else {
                    throw LaunchError(executable: executable.path, errno: errno)
                }
                let (childEnd, parentEnd) = childReads ? (fds[0], fds[1]) : (fds[1], fds[0])
                childEnds.append(childEnd)
                parentEnds.append(parentEnd)
                // dup2 clears close-on-exec on the target descriptor only.
                posix_spawn_file_actions_adddup2(&actions, childEnd, target)
                return FileHandle(fileDescriptor: parentEnd, closeOnDealloc: true)
            }
        }
        let input = try wire(stdin, to: 0, childReads: true)
        let output = try wire(stdout, to: 1, childReads: false)
        let error = try wire(stderr, to: 2, childReads: false)
        closeFromThreeInChild(&actions, &attributes)

        let argv = [executable.path] + arguments
        let env = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        var pid: pid_t = 0
        let status = withCStrings(argv) { argvPointers in
            withCStrings(env) { envPointers in
                posix_spawn(&pid, executable.path, &actions, &attributes, argvPointers, envPointers)
            }
        }
        guard status == 0 else {
            for fd in parentEnds { close(fd) }
            throw LaunchError(executable: executable.path, errno: status)
        }
        return ChildProcess(pid: pid, stdout: output, stderr: error, stdin: input)
    }

    /// Sends `signal` (SIGTERM by default); a no-op once the child was
    /// reaped.
    public func signal(_ signal: Int32 = SIGTERM) {
        exit.ifRunning { kill(pid, signal) }
    }

    /// Waits for the child to exit (blocking the calling thread) and returns
    /// its exit status, or 128 + the signal that ended it.
    @discardableResult
    public func waitUntilExit() -> Int32 {
        exit.reap(pid)
    }

    /// The exit status (see ``waitUntilExit()``); waits if the child still
    /// runs.
    public var terminationStatus: Int32 { waitUntilExit() }

    private static func pipeCloseOnExec(_ fds: inout [Int32]) -> Int32 {
        #if canImport(Glibc)
            // pipe2 sets close-on-exec atomically; Swift's Glibc module
            // does not declare it (it needs _GNU_SOURCE).
            typealias Pipe2 = @convention(c) (UnsafeMutablePointer<Int32>, Int32) -> Int32
            if let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "pipe2") {
                return unsafeBitCast(symbol, to: Pipe2.self)(&fds, O_CLOEXEC)
            }
        #endif
        guard pipe(&fds) == 0 else { return -1 }
        _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
        return 0
    }

    private static func closeFromThreeInChild(
        _ actions: inout posix_spawn_file_actions_t, _ attributes: inout posix_spawnattr_t
    ) {
        #if canImport(Glibc)
            // Not in Swift's Glibc module (it needs _GNU_SOURCE): looked up
            // at run time, skipped where the C library lacks it.
            typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
            if let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") {
                _ = unsafeBitCast(symbol, to: CloseFrom.self)(&actions, 3)
            }
        #elseif canImport(Darwin)
            posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_CLOEXEC_DEFAULT))
        #endif
    }
}

/// The child's exit, reaped once.
private final class ExitStatus: @unchecked Sendable {
    // `@unchecked Sendable`: `status` and `reaping` are read and written
    // only while `condition` is locked; one caller at a time runs waitpid
    // (outside the lock, so a signal can still be sent meanwhile) and the
    // others wait on the condition for its result.
    private let condition = NSCondition()
    private var status: Int32?
    private var reaping = false

    func ifRunning(_ body: () -> Void) {
        condition.lock()
        defer { condition.unlock() }
        if status == nil { body() }
    }

    func reap(_ pid: pid_t) -> Int32 {
        condition.lock()
        while reaping && status == nil { condition.wait() }
        if let status {
            condition.unlock()
            return status
        }
        reaping = true
        condition.unlock()
        var raw: Int32 = 0
        while waitpid(pid, &raw, 0) == -1 && errno == EINTR {}
        let signal = raw & 0x7f
        let result = signal == 0 ? (raw >> 8) & 0xff : 128 + signal
        condition.lock()
        status = result
        condition.broadcast()
        condition.unlock()
        return result
    }
}

/// Calls `body` with a NULL-terminated C array of `strings`.
private func withCStrings<R>(
    _ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R
) -> R {
    var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
    pointers.append(nil)
    defer { for pointer in pointers { free(pointer) } }
    return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
}
