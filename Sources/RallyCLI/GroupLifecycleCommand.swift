import ArgumentParser
import Foundation
import RallyCore

/// The group lifecycle commands beyond create, add and remove: the
/// profile, roles in batch, block for all, the welcome message, leave.
extension GroupCommand {
    struct Profile: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show the group's profile, or change it (owner): every member sees the change.")
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String
        @Option(help: "A new display name.") var name: String?
        @Option(help: "A new full name.") var fullName: String?
        @Option(help: "A new description.") var description: String?
        @Option(help: "A new image file (PNG, JPEG, GIF or WebP, at most 64 KiB).") var image: String?

        func run() async throws {
            let picture = try image.map(GroupCommand.image)
            let client = try GroupCommand.open(options)
            var record = try await client.group(group)
            if name != nil || fullName != nil || description != nil || picture != nil {
                record = try await client.updateGroupProfile(
                    group, name: name, fullName: fullName, description: description, image: picture)
            } else {
                try await client.syncGroup(record.groupID)
                record = try await client.group(record.groupID)
            }
            await client.disconnect()
            let json = GroupJSON(record, me: client.inboxID)
            options.output.emit(json) {
                var lines = [
                    "\(json.name.terminalSafe)\(json.fullName.isEmpty ? "" : " — \(json.fullName.terminalSafe)")"
                ]
                if !json.description.isEmpty { lines.append(json.description.terminalSafe) }
                if let digest = json.imageDigest { lines.append("image: sha256 \(digest)") }
                if !json.welcomeMessage.isEmpty { lines.append("welcome message: \(json.welcomeMessage.terminalSafe)") }
                return lines.joined(separator: "\n")
            }
        }
    }

    struct Role: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Give members one role in one change (you need admin; never above your own role).")
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String
        @Argument(help: "observer, member, moderator, admin or owner.") var role: String
        @Argument(help: "The members' inbox ids.") var inboxIDs: [String]

        func run() async throws {
            guard let role = GroupRole(name: role) else {
                throw ValidationError("ROLE must be observer, member, moderator, admin or owner")
            }
            let inboxes = try GroupCommand.inboxes(inboxIDs)
            let client = try GroupCommand.open(options)
            let record = try await client.changeRoles(of: inboxes, to: role, in: group)
            await client.disconnect()
            options.output.emit(GroupJSON(record, me: client.inboxID)) {
                "\(inboxes.count) member\(inboxes.count == 1 ? " is" : "s are") now \(role) in \"\(record.state.profile.name.terminalSafe)\""
            }
        }
    }

    struct Block: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Block members for all (moderator and above): every member sees their messages as blocked.")
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String
        @Argument(help: "The members' inbox ids.") var inboxIDs: [String]

        func run() async throws { try await GroupCommand.block(group, inboxIDs, blocked: true, options: options) }
    }

    struct Unblock: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show blocked members' messages again, for all.")
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String
        @Argument(help: "The members' inbox ids.") var inboxIDs: [String]

        func run() async throws { try await GroupCommand.block(group, inboxIDs, blocked: false, options: options) }
    }

    static func block(_ group: String, _ inboxIDs: [String], blocked: Bool, options: ClientOptions) async throws {
        let inboxes = try inboxes(inboxIDs)
        let client = try open(options)
        try await client.blockMembers(inboxes, in: group, blocked: blocked)
        let record = try await client.group(group)
        await client.disconnect()
        options.output.emit(GroupJSON(record, me: client.inboxID)) {
            "\(blocked ? "blocked" : "unblocked") \(inboxes.count) member\(inboxes.count == 1 ? "" : "s") for all in \"\(record.state.profile.name.terminalSafe)\""
        }
    }

    struct Welcome: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Set the welcome message each new member sees (owner; \"\" removes it).")
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String
        @Argument(help: "The welcome message.") var text: String

        func run() async throws {
            let client = try GroupCommand.open(options)
            try await client.setWelcomeMessage(text, in: group)
            let record = try await client.group(group)
            await client.disconnect()
            options.output.emit(GroupJSON(record, me: client.inboxID)) {
                text.isEmpty
                    ? "removed the welcome message of \"\(record.state.profile.name.terminalSafe)\""
                    : "new members of \"\(record.state.profile.name.terminalSafe)\" will see: \(text.terminalSafe)"
            }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete a group (owner): every member is told and it is removed everywhere.",
            discussion:
                "Members drop its messages and keys; the relay deletes its data and keeps only a tombstone, so members who were away learn it too. Later joins are told the group was not found. Run it again if the relay could not be reached."
        )
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String

        func run() async throws {
            let client = try GroupCommand.open(options)
            try await client.deleteGroup(group)
            let record = try await client.group(group)
            await client.disconnect()
            options.output.emit(GroupJSON(record, me: client.inboxID)) {
                "deleted \"\(record.state.profile.name.terminalSafe)\" for every member; the relay keeps none of its data"
            }
        }
    }

    struct Leave: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Leave a group: you keep its history here but no longer send or receive.",
            discussion:
                "The others move to a new key you never get. The last owner of a group with other members must first make someone else owner (`rally group role GROUP owner INBOX`) or delete the group (`rally group delete GROUP`)."
        )
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String

        func run() async throws {
            let client = try GroupCommand.open(options)
            try await client.leaveGroup(group)
            let record = try await client.group(group)
            await client.disconnect()
            options.output.emit(GroupJSON(record, me: client.inboxID)) {
                "left \"\(record.state.profile.name.terminalSafe)\"; its history stays on this device"
            }
        }
    }
}
