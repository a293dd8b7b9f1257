public import Foundation

/// The `rally` executable built alongside the tests, run as a real child
/// process.
public enum RallyBinary {
    /// What a test passes as `--timeout` to a `rally` command that waits
    /// on another process (a join answered by a watching admin): seconds,
    /// long enough for a full run on two loaded cores, where such a join
    /// once took over 60 s; a command that hangs still fails.
    public static let waitTimeout = "240"

    public static var url: URL {
        if let override = ProcessInfo.processInfo.environment["RALLY_BINARY"] {
            return URL(fileURLWithPath: override)
        }
        // The test runner lives in the products directory next to `rally`.
        var candidates = [URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()]
        let exe = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        candidates.append(exe.deletingLastPathComponent())
        candidates.append(exe.deletingLastPathComponent().deletingLastPathComponent())
        for directory in candidates {
            let url = directory.appendingPathComponent("rally")
            if FileManager.default.isExecutableFile(atPath: url.path) { return url }
        }
        return candidates[0].appendingPathComponent("rally")
    }

    public struct Result: Sendable {
        public let status: Int32
        public let stdout: String
        public let stderr: String
    }

    /// Runs `rally ARGS…` to completion and captures its output. The
    /// blocking wait happens on a thread of its own, never on the Swift
    /// concurrency pool (which an in-process relay needs meanwhile). A
    /// test whose time limit cancels the wait ends the child, so a hung
    /// command fails its test instead of holding up the run.
    public static func run(_ arguments: [String], environment: [String: String] = [:]) async throws -> Result {
        var env = ProcessInfo.processInfo.environment
        for (key, value) in environment { env[key] = value }
        let process = try ChildProcess.launch(url, arguments, environment: env)
        return try await withTaskCancellationHandler {
            try await onOwnThread { collect(process) }
        } onCancel: {
            process.signal(SIGKILL)
        }
    }

    static func collect(_ process: ChildProcess) -> Result {
        // Drain stderr on another thread while reading stdout, so a chatty
        // child can never block on a full pipe.
        let errBox = PipeDrain(process.standardError!)
        let outData = process.standardOutput!.readDataToEndOfFile()
        let errBytes = errBox.wait()
        let status = process.waitUntilExit()
        return Result(
            status: status, stdout: String(decoding: outData, as: UTF8.self),
            stderr: String(decoding: errBytes, as: UTF8.self))
    }
}

/// `rally relay` as a child process, for tests that kill it.
public final class RelayProcess: Sendable {
    public let process: ChildProcess
    public let url: URL
    public let port: Int

    private init(process: ChildProcess, url: URL, port: Int) {
        self.process = process
        self.url = url
        self.port = port
    }

    /// Starts `rally relay --port PORT --data DIR` (with `arguments` after
    /// them, e.g. `--public-url`) and waits for its "listening on" line.
    public static func start(dataDirectory: URL, port: Int = 0, arguments: [String] = []) async throws -> RelayProcess {
        try await onOwnThread { try startBlocking(dataDirectory: dataDirectory, port: port, arguments: arguments) }
    }

    static func startBlocking(dataDirectory: URL, port: Int, arguments: [String] = []) throws -> RelayProcess {
        let process = try ChildProcess.launch(
            RallyBinary.url,
            [
                "relay", "--port", String(port), "--data", dataDirectory.path, "--log-level", "error",
                "--auth-timeout-seconds", String(TestRelay.testAuthTimeout.components.seconds),
            ] + arguments,
            stderr: .inherit)
        let out = process.standardOutput!
        var buffer = Data()
        while true {
            let chunk = out.availableData
            guard !chunk.isEmpty else { throw RelayProcessError.exitedBeforeListening }
            buffer.append(chunk)
            let text = String(decoding: buffer, as: UTF8.self)
            if let line = text.split(separator: "\n").first(where: { $0.contains("listening on ") }),
                let word = line.split(separator: " ").first(where: { $0.hasPrefix("http://") }),
                let url = URL(string: String(word)), let port = url.port
            {
                return RelayProcess(process: process, url: url, port: port)
            }
        }
    }

    public func kill(signal: Int32 = SIGKILL) async {
        let process = self.process
        try? await onOwnThread {
            process.signal(signal)
            process.waitUntilExit()
        }
    }

    public var terminationStatus: Int32 { process.terminationStatus }
}

public enum RelayProcessError: Error {
    case exitedBeforeListening
}

/// Reads a pipe to its end on a background thread.
final class PipeDrain: Sendable {
    private let done = DispatchSemaphore(value: 0)
    // Written once by the reading thread before `done` is signalled and
    // read only after waiting on it: the semaphore orders the accesses.
    nonisolated(unsafe) private var data = Data()

    init(_ handle: FileHandle) {
        Thread.detachNewThread { [self] in
            data = handle.readDataToEndOfFile()
            done.signal()
        }
    }

    func wait() -> Data {
        done.wait()
        return data
    }
}

/// Runs blocking work (pipes, waiting for a child) on a dedicated thread and
/// resumes the caller when it is done.
public func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread {
            continuation.resume(with: Result { try body() })
        }
    }
}

/// The package's root directory (the one holding Package.swift), found from
/// the calling test's source file.
public func packageRoot(_ filePath: String = #filePath) -> URL {
    var root = URL(fileURLWithPath: filePath).deletingLastPathComponent()
    while !FileManager.default.fileExists(atPath: root.appendingPathComponent("Package.swift").path) {
        let parent = root.deletingLastPathComponent()
        precondition(parent != root, "no Package.swift above \(filePath)")
        root = parent
    }
    return root
}

/// Runs a tool from the package root to completion, its stdout and stderr
/// together, waiting on a thread of its own (never on the concurrency pool).
public func runTool(_ executable: String, _ arguments: [String]) async throws -> (status: Int32, output: String) {
    try await onOwnThread {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.currentDirectoryURL = packageRoot()
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, output)
    }
}
