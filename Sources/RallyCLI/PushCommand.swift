import ArgumentParser
import Foundation
import RallyCore

/// `rally push register URL | unregister | status`: the webhook the relay
/// calls when a message that asks for a push reaches this identity's inbox
/// (ADR 0020).
struct PushCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "push", abstract: "Register the webhook the relay calls when a message arrives.",
        subcommands: [Register.self, Unregister.self, Status.self])

    struct TargetJSON: Encodable {
        let url: String?
    }

    struct Register: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Register (or replace) this identity's push target: an https URL of your push service. The relay posts an APNs-shaped alert to it that names no sender and carries no content."
        )

        @OptionGroup var options: ClientOptions
        @Argument(help: "The webhook URL (https).") var url: String

        func run() async throws {
            guard let target = URL(string: url), target.scheme != nil, target.host != nil else {
                throw ValidationError("\(url) is not an absolute URL")
            }
            let client = try options.openClient()
            let stored = try await client.registerPush(target)
            options.output.emit(TargetJSON(url: stored.absoluteString)) { "Push target registered: \(stored)" }
        }
    }

    struct Unregister: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove this identity's push target.")

        @OptionGroup var options: ClientOptions

        func run() async throws {
            let client = try options.openClient()
            let removed = try await client.unregisterPush()
            options.output.emit(TargetJSON(url: nil)) {
                removed ? "Push target removed." : "No push target was registered."
            }
        }
    }

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show this identity's push target.")

        @OptionGroup var options: ClientOptions

        func run() async throws {
            let client = try options.openClient()
            let target = try await client.pushTarget()
            options.output.emit(TargetJSON(url: target?.absoluteString)) {
                target.map { "Push target: \($0)" } ?? "No push target is registered."
            }
        }
    }
}
