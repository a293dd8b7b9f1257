import ArgumentParser
import Foundation
import RallyCLI

/// The executable's entry point: the root command's configuration (and so
/// every subcommand) comes from RallyCLI, where tests can reach it.
@main
struct RallyMain: AsyncParsableCommand {
    static let configuration = RallyCommand.configuration

    /// ArgumentParser's own `main`, except that the message of an error
    /// (which may quote text from other people: group names, reasons) is
    /// escaped for the terminal before it is printed.
    static func main() async {
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
            PeakMemoryReport.writeIfAsked()
        } catch {
            PeakMemoryReport.writeIfAsked()
            let code = exitCode(for: error)
            let message = TerminalText.escaped(fullMessage(for: error), keepingNewlines: true)
            if !message.isEmpty {
                let handle = code == .success ? FileHandle.standardOutput : FileHandle.standardError
                handle.write(Data((message + "\n").utf8))
            }
            Foundation.exit(code.rawValue)
        }
    }
}

/// With `RALLY_PEAK_MEMORY_REPORT=<file>`, the process writes its peak
/// resident memory in bytes to that file as it ends: how tests and
/// `rally-bench` measure what a transfer costs. It is read from this
/// program's own address space (`VmHWM`), since the kernel's per-process
/// maximum also counts the spawning process's memory before `exec`.
enum PeakMemoryReport {
    static let environmentVariable = "RALLY_PEAK_MEMORY_REPORT"

    static func writeIfAsked() {
        guard let path = ProcessInfo.processInfo.environment[environmentVariable], !path.isEmpty,
            let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
            let kibibytes = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
        else { return }
        try? Data(String(kibibytes * 1024).utf8).write(to: URL(fileURLWithPath: path))
    }
}
