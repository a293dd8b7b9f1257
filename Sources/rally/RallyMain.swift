import ArgumentParser
import RallyCLI

/// The executable's entry point: the root command's configuration (and so
/// every subcommand) comes from RallyCLI, where tests can reach it.
@main
struct RallyMain: AsyncParsableCommand {
    static let configuration = RallyCommand.configuration
}
