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
        } catch {
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
