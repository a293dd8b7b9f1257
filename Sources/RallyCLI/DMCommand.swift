import ArgumentParser
import Foundation
import RallyCore
import RallyCrypto

struct DMCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dm", abstract: "End-to-end encrypted direct messages.", subcommands: [Send.self, Read.self])

    struct Send: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Send a text message to an inbox id.")

        @OptionGroup var options: ClientOptions
        @Argument(help: "The recipient's inbox id (see `rally id show`).") var inboxID: String
        @Argument(help: "The text to send.") var text: String

        func run() async throws {
            let recipient: InboxID
            do {
                recipient = try InboxID(validating: inboxID)
            } catch {
                throw ValidationError(error.description)
            }
            let client = try options.openClient()
            let message = try await client.sendText(text, to: recipient)
            await client.disconnect()
            options.output.emit(MessageJSON(message)) {
                if message.isQueued {
                    return
                        "queued \(message.id) for \(recipient): the relay is out of reach; it is sent when it is back (the next rally command that reaches it, or `rally watch`)"
                }
                return "sent \(message.id) to \(recipient) (relay seq \(message.seq.map(String.init) ?? "?"))"
            }
        }
    }

    struct Read: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Fetch new direct messages and print them.",
            discussion:
                "Prints what arrived since the last read. With --follow, stays connected and prints messages as they arrive (one JSON object per line with --json)."
        )

        @OptionGroup var options: ClientOptions
        @Flag(help: "Stay connected and print messages as they arrive.") var follow = false
        @Flag(help: "Print every stored message, not only new ones.") var all = false

        func run() async throws {
            let client = try options.openClient()
            let output = options.output
            if follow {
                if all { try await printStored(client, output: output, asLines: true) }
                let status = ConnectionStatusLines.start(client, output: output)
                defer { status.cancel() }
                try await client.followInbox(untilCaughtUp: false) { event in
                    switch event {
                    case .message(let message):
                        output.emit(MessageJSON(message)) { MessageJSON.human(message) }
                    case .rejected(let rejection):
                        Output.warn("warning: \("\(rejection)".terminalSafe)")
                    case .caughtUp:
                        break
                    }
                }
                return
            }
            let report = try await client.syncInbox()
            await client.disconnect()
            for rejection in report.rejected { Output.warn("warning: \("\(rejection)".terminalSafe)") }
            if all {
                try await printStored(client, output: output, asLines: false)
            } else if output.json {
                output.emit(report.received.map(MessageJSON.init)) { "" }
            } else if report.received.isEmpty {
                Output.write("no new messages")
            } else {
                for message in report.received { Output.write(MessageJSON.human(message)) }
            }
        }

        private func printStored(_ client: RallyClient, output: Output, asLines: Bool) async throws {
            let messages = try await client.directMessageHistory()
            if output.json && !asLines {
                output.emit(messages.map(MessageJSON.init)) { "" }
            } else {
                for message in messages { output.emit(MessageJSON(message)) { MessageJSON.human(message) } }
            }
        }
    }
}
