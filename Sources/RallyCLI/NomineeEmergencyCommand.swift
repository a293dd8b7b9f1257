import ArgumentParser
import Foundation
import RallyCore

/// `rally nominee emergency …`: emergency access (ADR 0016). The nominee
/// asks; the owner approves or rejects; without an answer the relay
/// releases the vault key when the wait ends.
struct EmergencyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "emergency",
        abstract: "Emergency access: ask for a vault, or approve or reject a request.",
        discussion:
            "A nominee invited with --emergency-wait and confirmed may ask for the vault (`request`); the owner is told and can `approve` (at once) or `reject`. Without an answer the relay releases the key when the wait ends, even with the owner offline; `check` installs it.",
        subcommands: [Request.self, Check.self, Status.self, Approve.self, Reject.self])

    /// The vault a nominee names (their side).
    struct NomineeSide: ParsableArguments {
        @Argument(help: "The vault's name or id, or the invitation's id.") var vault: String
    }

    /// The vault and nominee an owner names.
    struct OwnerSide: ParsableArguments {
        @Argument(help: "The vault's name or id.") var vault: String
        @Argument(help: "The nominee's name, inbox id or id.") var nominee: String
    }

    struct Request: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Ask for emergency access to a vault you are a nominee of (the owner is told).")
        @OptionGroup var options: ClientOptions
        @OptionGroup var side: NomineeSide

        func run() async throws {
            try await EmergencyCommand.show(options, nominee: true) { try await $0.requestEmergencyAccess(side.vault) }
        }
    }

    struct Check: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "See whether your emergency access was granted; installs the vault key when it was.")
        @OptionGroup var options: ClientOptions
        @OptionGroup var side: NomineeSide

        func run() async throws {
            try await EmergencyCommand.show(options, nominee: true) { try await $0.checkEmergencyAccess(side.vault) }
        }
    }

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Where a nominee's emergency access stands (owner).")
        @OptionGroup var options: ClientOptions
        @OptionGroup var side: OwnerSide

        func run() async throws {
            try await EmergencyCommand.show(options, nominee: false) {
                try await $0.emergencyAccess(of: side.nominee, in: side.vault)
            }
        }
    }

    struct Approve: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Approve a nominee's request: the relay releases the vault key at once.")
        @OptionGroup var options: ClientOptions
        @OptionGroup var side: OwnerSide

        func run() async throws {
            try await EmergencyCommand.show(options, nominee: false) {
                try await $0.approveEmergencyAccess(of: side.nominee, in: side.vault)
            }
        }
    }

    struct Reject: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Reject a nominee's request: the relay never releases the key for it.")
        @OptionGroup var options: ClientOptions
        @OptionGroup var side: OwnerSide

        func run() async throws {
            try await EmergencyCommand.show(options, nominee: false) {
                try await $0.rejectEmergencyAccess(of: side.nominee, in: side.vault)
            }
        }
    }

    /// Runs one emergency-access call and prints where access stands.
    static func show(
        _ options: ClientOptions, nominee: Bool, _ call: (RallyClient) async throws -> EmergencyAccessStatus
    ) async throws {
        let client = try options.openClient()
        let status = try await call(client)
        await client.disconnect()
        options.output.emit(status) { human(status, nominee: nominee) }
    }

    static func human(_ status: EmergencyAccessStatus, nominee: Bool) -> String {
        let vault = "\"\(status.vaultName.terminalSafe)\""
        let who = status.nomineeName.map { $0.terminalSafe } ?? "the nominee"
        func at(_ date: Date?) -> String { date.map { ISO8601DateFormatter.rally.string(from: $0) } ?? "?" }
        switch status.state {
        case .idle:
            return nominee
                ? "emergency access to \(vault): not asked for; the wait after asking is \(wait(status.waitMs))"
                : "\(who) has not asked for emergency access to \(vault)"
        case .requested:
            return nominee
                ? "emergency access to \(vault) requested: granted at \(at(status.releasesAt)) unless the owner rejects; run `rally nominee emergency check \(status.vaultName.terminalSafe)` then"
                : "\(who) asked for emergency access to \(vault) at \(at(status.requestedAt)): granted at \(at(status.releasesAt)) unless you reject it"
        case .approved, .released:
            let how = status.state == .approved ? "approved by the owner" : "the wait ended without a rejection"
            if nominee {
                return status.granted
                    ? "emergency access to \(vault) granted (\(how)): `rally vault ls \(status.vaultName.terminalSafe)`"
                    : "emergency access to \(vault) granted (\(how)): run `rally nominee emergency check` to get the key"
            }
            return "\(who) has emergency access to \(vault) (\(how))"
        case .rejected:
            return nominee
                ? "the owner rejected your request for emergency access to \(vault) at \(at(status.rejectedAt)); a new request starts a new wait"
                : "rejected: \(who)'s request for emergency access to \(vault) will not be granted"
        }
    }

    /// What `nominee list` adds for a nominee with emergency access.
    static func ownerNote(_ terms: EmergencyAccessTerms?) -> String {
        guard let terms else { return "" }
        guard let releasesAt = terms.releasesAt else { return "  emergency access (wait \(wait(terms.waitMs)))" }
        return
            "  🆘 emergency access requested: granted at \(ISO8601DateFormatter.rally.string(from: releasesAt)) unless you reject"
    }

    static func offer(_ terms: EmergencyAccessTerms?) -> String {
        terms.map { ", emergency access after a wait of \(wait($0.waitMs))" } ?? ""
    }

    /// A wait in the largest whole unit: 7d, 12h, 30m, 45s.
    static func wait(_ milliseconds: Int64) -> String {
        let seconds = milliseconds / 1000
        for (unit, size) in [("d", Int64(86_400)), ("h", 3600), ("m", 60)] where seconds >= size && seconds % size == 0
        {
            return "\(seconds / size)\(unit)"
        }
        return "\(seconds)s"
    }
}
