import ArgumentParser
import Foundation
import RallyCore

/// `rally vault share`: the app side of the vault hand-off (the seed's
/// "Invite via Messages"): writes the vault's id and name to the home's
/// shared container for the extension to pre-select.
struct VaultShareCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "share",
        abstract: "Hand a vault over to the app extension that invites its nominees.",
        discussion:
            "Writes pending_nominee_vault_id and pending_nominee_vault_name to the shared container group.<app id> in <home>/shared; `rally vault pending` (or `rally nominee invite` without a vault) reads and clears them."
    )

    @OptionGroup var options: ClientOptions
    @Argument(help: "The vault's name or id.") var vault: String
    @Option(name: .customLong("app-id"), help: "The app id of the shared container's suite, group.<app id>.")
    var appID = SharedContainer.defaultAppID

    func run() async throws {
        let client = try options.openClient()
        let shared = try await client.vault(vault)
        let container = try SharedContainer.default(home: options.homeURL, appID: appID)
        try VaultHandoff(container: container).offer(vaultID: shared.id, vaultName: shared.name)
        options.output.emit(
            VaultPendingCommand.PendingJSON(pending: PendingVault(vaultID: shared.id, vaultName: shared.name))
        ) {
            "handed over vault \(shared.name.terminalSafe) (\(shared.id)) to the extension"
        }
    }
}

/// `rally vault pending`: the extension side of the vault hand-off (see
/// ``VaultHandoff``), over the home's shared container
/// (`<home>/shared/group.<app id>.json`).
struct VaultPendingCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pending",
        abstract: "What an app extension runs on load: prints the vault the app handed over and clears it.",
        discussion:
            "Reads pending_nominee_vault_id and pending_nominee_vault_name from the shared container group.<app id> in <home>/shared and clears them in the same locked step: of two processes running this at once, exactly one prints the vault. With --peek, prints it and leaves it in place."
    )

    @OptionGroup var options: ClientOptions
    @Flag(help: "Print the pending vault without clearing it.") var peek = false
    @Option(name: .customLong("app-id"), help: "The app id of the shared container's suite, group.<app id>.")
    var appID = SharedContainer.defaultAppID

    /// `{"vaultID":…,"vaultName":…}` (a missing field as null), or
    /// `{"pending":null}` when no vault was handed over.
    struct PendingJSON: Encodable {
        let pending: PendingVault?

        enum CodingKeys: String, CodingKey {
            case pending, vaultID, vaultName
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            if let pending {
                try container.encode(pending.vaultID, forKey: .vaultID)
                try container.encode(pending.vaultName, forKey: .vaultName)
            } else {
                try container.encodeNil(forKey: .pending)
            }
        }
    }

    func run() async throws {
        let container = try SharedContainer.default(home: options.homeURL, appID: appID)
        let handoff = VaultHandoff(container: container)
        let pending = try peek ? handoff.peek() : handoff.take()
        options.output.emit(PendingJSON(pending: pending)) { Self.human(pending) }
    }

    static func human(_ pending: PendingVault?) -> String {
        guard let pending else { return "No vault was handed over." }
        let name = pending.vaultName.map(\.terminalSafe) ?? "(no name)"
        let id = pending.vaultID.map(\.terminalSafe) ?? "no id"
        return "Pending vault: \(name) (\(id))"
    }
}
