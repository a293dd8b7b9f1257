import ArgumentParser
import Foundation
import RallyCore
import RallyCrypto

/// Member admission and the group link: the approval queue, its support
/// chat, the group's admission setting and its one link.
extension GroupCommand {
    static let linkNotFoundExit = ExitCode(4)
    static let duplicateLinkExit = ExitCode(5)

    static func role(_ text: String) throws -> GroupRole {
        guard let role = GroupRole(name: text) else {
            throw ValidationError("ROLE must be observer, member, moderator, admin or owner")
        }
        return role
    }

    struct PendingJSON: Encodable {
        let inboxId: String
        let name: String
        let role: String
        let addedBy: String

        init(_ member: PendingMember) {
            inboxId = member.inboxID.rawValue
            name = member.identity.displayName
            role = member.role.description
            addedBy = member.addedBy.rawValue
        }
    }

    struct Admission: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show or set (owner) whether joiners wait for a moderator's approval: auto or approval.")
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String
        @Argument(help: "auto or approval; omit to show.") var admission: String?

        func run() async throws {
            let chosen = try admission.map { text throws -> RallyCore.GroupAdmission in
                guard let value = RallyCore.GroupAdmission(rawValue: text) else {
                    throw ValidationError("ADMISSION must be auto or approval")
                }
                return value
            }
            let client = try GroupCommand.open(options)
            if let chosen { try await client.groupAdmission.setAdmission(chosen, in: group) }
            try await client.syncGroup(group)
            let record = try await client.group(group)
            await client.disconnect()
            let now = record.state.admission
            options.output.emit(["groupId": record.groupID, "admission": now.rawValue]) {
                now == .approval
                    ? "joiners of \"\(record.state.profile.name.terminalSafe)\" wait for a moderator's approval"
                    : "joiners of \"\(record.state.profile.name.terminalSafe)\" are admitted at once"
            }
        }
    }

    struct Pending: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List joiners waiting for approval (moderator and above).")
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String

        func run() async throws {
            let client = try GroupCommand.open(options)
            let waiting = try await client.groupAdmission.pending(in: group)
            await client.disconnect()
            options.output.emit(waiting.map(PendingJSON.init)) {
                waiting.isEmpty
                    ? "nobody is waiting for approval"
                    : waiting.map {
                        "\($0.inboxID)  \($0.identity.displayName.terminalSafe)  asks to join as \($0.role)"
                    }.joined(separator: "\n")
            }
        }
    }

    struct Admit: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Admit a joiner waiting for approval (moderator and above), optionally with another role.")
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String
        @Argument(help: "The joiner's inbox id.") var inboxID: String
        @Option(help: "The role to give (default: the one they asked with; never above yours).") var role: String?

        func run() async throws {
            let inbox = try GroupCommand.inbox(inboxID)
            let granted = try role.map(GroupCommand.role)
            let client = try GroupCommand.open(options)
            let record = try await client.groupAdmission.admit(inbox, role: granted, in: group)
            await client.disconnect()
            let given = record.state.role(of: inbox)?.description ?? "member"
            options.output.emit(GroupJSON(record, me: client.inboxID)) {
                "admitted \(inbox) to \"\(record.state.profile.name.terminalSafe)\" as \(given); their welcome is on its way"
            }
        }
    }

    struct Reject: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Turn away a joiner waiting for approval (moderator and above); they are told.")
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String
        @Argument(help: "The joiner's inbox id.") var inboxID: String

        func run() async throws {
            let inbox = try GroupCommand.inbox(inboxID)
            let client = try GroupCommand.open(options)
            let record = try await client.groupAdmission.reject(inbox, in: group)
            await client.disconnect()
            options.output.emit(GroupJSON(record, me: client.inboxID)) {
                "turned \(inbox) away from \"\(record.state.profile.name.terminalSafe)\"; they were told"
            }
        }
    }

    struct Support: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "The member support chat with a joiner waiting for approval: `send TEXT` or `read`.",
            discussion:
                "Only the group's moderators and above and that joiner read it. The joiner uses its own inbox id as INBOX."
        )
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix; the joiner gives the id its join status shows).")
        var group: String
        @Argument(help: "The pending joiner's inbox id.") var inboxID: String
        @Argument(help: "send or read.") var action: String
        @Argument(help: "The message (with send).") var text: String?

        struct SupportJSON: Encodable {
            let id: String
            let sender: String
            let senderName: String
            let text: String
            let sentAt: Date
            let outgoing: Bool

            init(_ message: SupportMessage) {
                id = message.id
                sender = message.sender.rawValue
                senderName = message.senderName
                text = message.text
                sentAt = message.sentAt
                outgoing = message.outgoing
            }

            var human: String {
                "\(ISO8601DateFormatter.rally.string(from: sentAt))  \(outgoing ? "me" : senderName.terminalSafe): \(text.terminalSafe)"
            }
        }

        func validate() throws {
            guard action == "send" || action == "read" else { throw ValidationError("ACTION must be send or read") }
            if action == "send", (text ?? "").isEmpty { throw ValidationError("send needs the message text") }
        }

        func run() async throws {
            let member = try GroupCommand.inbox(inboxID)
            let client = try GroupCommand.open(options)
            if action == "send", let text {
                let sent = try await client.groupAdmission.sendSupport(text, in: group, member: member)
                await client.disconnect()
                let json = SupportJSON(sent)
                options.output.emit(json) { json.human }
                return
            }
            _ = try await client.syncInbox()
            let chat = try client.groupAdmission.support(in: group, member: member)
            await client.disconnect()
            let lines = chat.map(SupportJSON.init)
            options.output.emit(lines) {
                lines.isEmpty ? "no support messages yet" : lines.map(\.human).joined(separator: "\n")
            }
        }
    }

    struct Link: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "The group's one link: create, show, role, delete (admin).",
            discussion:
                "Exit status 4: the group has no link (group_link_not_found); 5: it has one already (duplicate_group_link).",
            subcommands: [LinkCreate.self, LinkShow.self, LinkRole.self, LinkDelete.self])
    }

    struct LinkJSON: Encodable {
        let groupId: String
        let link: String
        let webLink: String
        let slug: String
        let role: String
        let admission: String
        let name: String
        let imageSha256: String?

        init(_ link: GroupLink, groupID: String, client: RallyClient) {
            let links = client.groupLinks.links(for: link)
            groupId = groupID
            self.link = links.app
            webLink = links.web
            slug = link.slug
            role = link.role.description
            admission = link.admission.rawValue
            name = link.invite.payload.name
            imageSha256 = link.invite.payload.imageSha256.isEmpty ? nil : link.invite.payload.imageSha256.hexString
        }

        var human: String {
            [
                link, webLink,
                "link to \"\(name.terminalSafe)\": joins as \(role)\(admission == "approval" ? " after a moderator's approval" : "")",
            ].joined(separator: "\n")
        }
    }

    /// Runs a link action, turning the seed's two link errors into their
    /// own exit statuses (and, with --json, an error object).
    static func linkAction(
        _ options: ClientOptions, _ body: (RallyClient) async throws -> Void
    ) async throws {
        let client = try open(options)
        do {
            try await body(client)
            await client.disconnect()
        } catch RallyClientError.group(.commitRejected(let rejection))
            where rejection == .groupLinkNotFound || rejection == .duplicateGroupLink
        {
            await client.disconnect()
            let code = rejection == .groupLinkNotFound ? "group_link_not_found" : "duplicate_group_link"
            if options.output.json {
                options.output.emit(["error": code, "message": rejection.description]) { "" }
            }
            Output.warn("error: \(rejection.description)")
            throw rejection == .groupLinkNotFound ? linkNotFoundExit : duplicateLinkExit
        } catch {
            await client.disconnect()
            throw error
        }
    }

    struct LinkCreate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "create", abstract: "Create the group's link (one per group).")
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String
        @Option(help: "The role joiners get: observer, member, moderator or admin.") var role = "member"
        @Flag(help: "Joiners wait for a moderator's approval.") var approval = false

        func run() async throws {
            let granted = try GroupCommand.role(role)
            try await GroupCommand.linkAction(options) { client in
                let link = try await client.groupLinks.create(
                    in: group, role: granted, admission: approval ? .approval : .auto)
                let json = LinkJSON(link, groupID: try await client.group(group).groupID, client: client)
                options.output.emit(json) { json.human }
            }
        }
    }

    struct LinkShow: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "show", abstract: "Show the group's link.")
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String

        func run() async throws {
            try await GroupCommand.linkAction(options) { client in
                let link = try await client.groupLinks.show(in: group)
                let json = LinkJSON(link, groupID: try await client.group(group).groupID, client: client)
                options.output.emit(json) { json.human }
            }
        }
    }

    struct LinkRole: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "role", abstract: "Change the role new joiners get through the link (the link stays).")
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String
        @Argument(help: "observer, member, moderator or admin.") var role: String

        func run() async throws {
            let granted = try GroupCommand.role(role)
            try await GroupCommand.linkAction(options) { client in
                let link = try await client.groupLinks.change(in: group, role: granted)
                let json = LinkJSON(link, groupID: try await client.group(group).groupID, client: client)
                options.output.emit(json) { json.human }
            }
        }
    }

    struct LinkDelete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "delete", abstract: "Delete the group's link: every admin refuses it from now on.")
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String

        func run() async throws {
            try await GroupCommand.linkAction(options) { client in
                try await client.groupLinks.delete(in: group)
                let record = try await client.group(group)
                options.output.emit(["groupId": record.groupID, "link": "deleted"]) {
                    "deleted the link of \"\(record.state.profile.name.terminalSafe)\"; it admits nobody from now on"
                }
            }
        }
    }
}
