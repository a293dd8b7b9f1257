import ArgumentParser
import Foundation
import RallyCore

/// `rally group prefs` and `rally group react`: the owner's preferences
/// and the one preference-governed message the CLI sends.
extension GroupCommand {
    struct PreferenceJSON: Encodable {
        let key: String
        let enabled: Bool
        let minimumRole: String?
        let ttlSeconds: UInt64?
        /// Set by a newer client; kept, not enforced here.
        let known: Bool

        var human: String {
            var value = enabled ? "on" : "off"
            if enabled, let minimumRole { value += " (\(minimumRole) and above)" }
            if let ttlSeconds, key == GroupPreferences.Key.timedMessages.rawValue {
                value += enabled ? ", messages live \(ttlSeconds) s" : ""
            }
            return "\(key.padding(toLength: 16, withPad: " ", startingAt: 0)) \(value)\(known ? "" : " (unknown here)")"
        }
    }

    struct Prefs: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show the group's preferences, or change them (owner).",
            discussion: """
                KEY is timed_messages, reactions, voice, files, direct_messages, full_deletion, history or reports. \
                VALUE is on, off, or a role (on for that role and above); for timed_messages a duration \
                (30s, 10m, 1h, 7d) turns them on with that time to live. Every member's client enforces them at each \
                message's place in the log.
                """)
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String
        @Option(name: .customLong("set"), help: "KEY=VALUE (repeatable).") var settings: [String] = []

        static func parse(_ setting: String) throws -> (GroupPreferences.Key, GroupPreference) {
            let parts = setting.split(separator: "=", maxSplits: 1).map(String.init)
            guard parts.count == 2, let key = GroupPreferences.Key(rawValue: parts[0]) else {
                let keys = GroupPreferences.Key.allCases.map(\.rawValue).joined(separator: ", ")
                throw ValidationError("--set takes KEY=VALUE with KEY one of \(keys)")
            }
            let value = parts[1].lowercased()
            switch value {
            case "on":
                return (key, GroupPreference(enabled: true, ttlSeconds: GroupPreferences.defaults[key]!.ttlSeconds))
            case "off": return (key, GroupPreference(enabled: false))
            default:
                if let role = GroupRole(name: value) {
                    return (key, GroupPreference(enabled: true, minimumRole: role))
                }
                if key == .timedMessages {
                    let seconds = try InviteCommand.Create.duration(value, option: "timed_messages")
                    return (key, GroupPreference(enabled: true, ttlSeconds: UInt64(seconds.rounded())))
                }
                throw ValidationError("\(key.rawValue) takes on, off or a role, not \"\(parts[1])\"")
            }
        }

        func validate() throws { for setting in settings { _ = try Self.parse(setting) } }

        func run() async throws {
            let changes = Dictionary(try settings.map(Self.parse), uniquingKeysWith: { $1 })
            let client = try GroupCommand.open(options)
            var record = try await client.group(group)
            if changes.isEmpty {
                try await client.syncGroup(record.groupID)
                record = try await client.group(record.groupID)
            } else {
                record = try await client.setGroupPreferences(changes, in: group)
            }
            await client.disconnect()
            let preferences = record.state.preferences
            let rows =
                GroupPreferences.Key.allCases.map { key in
                    let value = preferences[key]
                    return PreferenceJSON(
                        key: key.rawValue, enabled: value.enabled, minimumRole: value.minimumRole?.description,
                        ttlSeconds: key == .timedMessages ? value.ttlSeconds : nil, known: true)
                }
                + preferences.unknownKeys.map { key in
                    let value = preferences.values[key]!
                    return PreferenceJSON(
                        key: key, enabled: value.enabled, minimumRole: value.minimumRole?.description,
                        ttlSeconds: value.ttlSeconds, known: false)
                }
            options.output.emit(rows) { rows.map(\.human).joined(separator: "\n") }
        }
    }

    struct React: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "React to a group message (if the group's preferences allow reactions for your role).")
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String
        @Argument(help: "The message id (as `rally group read --json` shows).") var messageID: String
        @Argument(help: "The emoji.") var emoji: String

        func run() async throws {
            let client = try GroupCommand.open(options)
            let sent = try await client.sendGroupReaction(emoji, to: messageID, in: group)
            await client.disconnect()
            options.output.emit(MessageJSON(sent)) { "reacted \(emoji.terminalSafe)" }
        }
    }

    struct DeleteMessage: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "delete-message",
            abstract: "Delete a group message: yours, or (moderator and above) anyone's.",
            discussion:
                "With the group's full_deletion preference on, every member's device removes it; off, each shows it as deleted."
        )
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String
        @Argument(help: "The message id (as `rally group read --json` shows).") var messageID: String

        func run() async throws {
            let client = try GroupCommand.open(options)
            try await client.deleteGroupMessage(messageID, in: group)
            await client.disconnect()
            options.output.emit(["deleted": messageID]) { "deleted message \(messageID.prefix(8))…" }
        }
    }

    struct DM: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "dm",
            abstract: "Send a direct message to another member of the group (if its preferences allow it).")
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String
        @Argument(help: "The member's inbox id.") var inboxID: String
        @Argument(help: "The message.") var text: String

        func run() async throws {
            let member = try GroupCommand.inbox(inboxID)
            let client = try GroupCommand.open(options)
            let sent = try await client.sendDirectToMember(text, to: member, in: group)
            await client.disconnect()
            options.output.emit(MessageJSON(sent)) { "sent to \(member)" }
        }
    }
}
