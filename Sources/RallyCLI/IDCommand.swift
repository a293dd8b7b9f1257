import ArgumentParser
import Foundation
import RallyCore

struct IDCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "id", abstract: "Create and show this user's identity.", subcommands: [New.self, Show.self])

    struct IdentityJSON: Encodable {
        let name: String
        let inboxId: String
        let home: String
    }

    struct New: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create an identity (Ed25519 + X25519), store it in --home and publish its key bundle.")

        @OptionGroup var options: ClientOptions
        @Option(help: "Display name others see.") var name: String

        func run() async throws {
            guard !name.isEmpty, name.utf8.count <= 128 else {
                throw ValidationError("--name must be 1 to 128 bytes")
            }
            let client = try await RallyClient.create(
                home: options.homeURL, relayURL: try options.relayURL(), displayName: name, logger: options.logger,
                connection: try options.connectionPolicy())
            await client.disconnect()
            let identity = IdentityJSON(name: name, inboxId: client.inboxID.rawValue, home: options.homeURL.path)
            options.output.emit(identity) {
                "Created identity \"\(name)\"\ninbox id: \(client.inboxID)\nstored in: \(options.homeURL.path)"
            }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print this identity's name and inbox id.")

        @OptionGroup var options: ClientOptions

        func run() async throws {
            let client = try options.openClient()
            let identity = IdentityJSON(
                name: client.identity.displayName, inboxId: client.inboxID.rawValue, home: options.homeURL.path)
            options.output.emit(identity) {
                "name: \(identity.name)\ninbox id: \(identity.inboxId)"
            }
        }
    }
}
