import ArgumentParser

struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench", abstract: "Benchmarks that print measurements.",
        subcommands: [RelayBench.self, GroupBench.self, JoinBench.self])
}
