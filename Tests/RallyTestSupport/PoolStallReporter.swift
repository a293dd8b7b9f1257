import Dispatch
import Foundation

/// Reports on standard error when Swift's concurrency pool runs no task
/// for `threshold` seconds: every task of the test process, in-process
/// relays included, is stopped meanwhile, and tests fail by timeouts that
/// say nothing of why. With `RALLY_TEST_STALL_STACKS=DIR` (and gdb
/// installed) it also writes every thread's stack to a file in DIR, which
/// is how the CPU-heavy tests now run with ``offThePool(_:)`` were found
/// (ADR 0024).
///
/// It probes from a thread of its own: a probe task that does not run
/// within the threshold means the pool's threads are all held.
enum PoolStallReporter {
    static let threshold: TimeInterval = 2
    static let probeInterval: TimeInterval = 0.5
    static let maximumStackDumps = 20

    /// Starts the reporter once per process; touched by ``TestLogger``,
    /// which nearly every test uses.
    static let started: Void = {
        let stacksDirectory = ProcessInfo.processInfo.environment["RALLY_TEST_STALL_STACKS"]
        Thread.detachNewThread {
            var dumps = 0
            while true {
                Thread.sleep(forTimeInterval: probeInterval)
                let ran = DispatchSemaphore(value: 0)
                let sent = Date()
                Task.detached { ran.signal() }
                guard ran.wait(timeout: .now() + threshold) == .timedOut else { continue }
                var dumped = ""
                if let stacksDirectory, dumps < maximumStackDumps {
                    dumps += 1
                    let file = "\(stacksDirectory)/stall-\(getpid())-\(dumps).txt"
                    dumpStacks(to: file)
                    dumped = "; stacks in \(file)"
                }
                ran.wait()
                let stalled = String(format: "%.1f", Date().timeIntervalSince(sent))
                FileHandle.standardError.write(
                    Data("rally tests: Swift's concurrency pool ran no task for \(stalled) s\(dumped)\n".utf8))
            }
        }
    }()

    /// gdb writes the stacks to `file` itself. Not through a pipe this
    /// process reads: gdb stops every thread of the process, the reading
    /// one too, so output beyond the pipe's 64 KiB blocked gdb, and with it
    /// the whole stopped test run, for good (stop 29, 50 KiB of stacks
    /// had fit before).
    private static func dumpStacks(to file: String) {
        let gdb = URL(fileURLWithPath: "/usr/bin/gdb")
        guard FileManager.default.isExecutableFile(atPath: gdb.path),
            let child = try? ChildProcess.launch(
                gdb,
                [
                    "-p", String(getpid()), "-batch", "-ex", "set logging file \(file)", "-ex",
                    "set logging overwrite on", "-ex", "set logging redirect on", "-ex", "set logging enabled on",
                    "-ex", "thread apply all bt 80",
                ], stdout: .null, stderr: .null)
        else { return }
        _ = child.waitUntilExit()
    }
}
