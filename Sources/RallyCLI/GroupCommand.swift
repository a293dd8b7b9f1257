import ArgumentParser
import Foundation
import RallyCore
import RallyCrypto

struct GroupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "group", abstract: "End-to-end encrypted groups with roles.",
        subcommands: [
            Create.self, Add.self, Remove.self, Send.self, Read.self, Members.self, List.self, Explode.self,
            Profile.self, Role.self, Block.self, Unblock.self, Welcome.self, Leave.self, Delete.self, Admission.self,
            Pending.self, Admit.self, Reject.self, Support.self,
            Link.self, Invitations.self, Accept.self, Decline.self, Prefs.self, React.self,
            DeleteMessage.self, DM.self,
        ])

    struct GroupJSON: Encodable {
        let groupId: String
        let name: String
        let fullName: String
        let description: String
        /// SHA-256 of the group's image, hex; nil without one.
        let imageDigest: String?
        let welcomeMessage: String
        let blocked: [String]
        let epoch: UInt64
        let status: String
        let myRole: String?
        let memberCount: Int

        init(_ record: GroupRecord, me: InboxID) {
            groupId = record.groupID
            name = record.state.profile.name
            fullName = record.state.profile.fullName
            description = record.state.profile.description
            imageDigest = record.state.profile.image?.digest
            welcomeMessage = record.state.welcomeMessage
            blocked = record.state.blocked.map(\.rawValue).sorted()
            epoch = record.state.epoch
            status = record.status.rawValue
            myRole = record.state.role(of: me)?.description
            memberCount = record.state.members.count
        }

        var human: String {
            "\(groupId.terminalSafe)  \(name.terminalSafe)  (\(memberCount) member\(memberCount == 1 ? "" : "s"), you: \(myRole ?? status), epoch \(epoch))"
        }
    }

    struct MemberJSON: Encodable {
        let inboxId: String
        let name: String
        let role: String
        let status: String

        var human: String {
            "\(inboxId)  \(name.terminalSafe.padding(toLength: 16, withPad: " ", startingAt: 0))  \(role)  \(status)"
        }
    }

    static func open(_ options: ClientOptions) throws -> RallyClient {
        try options.openClient()
    }

    static func inboxes(_ texts: [String]) throws -> [InboxID] {
        guard !texts.isEmpty else { throw ValidationError("name at least one member's inbox id") }
        return try texts.map(inbox)
    }

    /// A group image from a file: its type told by its bytes, its size
    /// checked before anything is sent.
    static func image(_ path: String) throws -> GroupImage {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw ValidationError("cannot read \(path): \(error.localizedDescription)")
        }
        guard data.count <= GroupImage.maxBytes else {
            throw ValidationError(
                "\(path) is \(data.count) bytes; a group image is at most \(GroupImage.maxBytes) bytes")
        }
        guard let image = GroupImage(sniffing: data) else {
            throw ValidationError("\(path) is not a PNG, JPEG, GIF or WebP image")
        }
        return image
    }

    static func inbox(_ text: String) throws -> InboxID {
        do {
            return try InboxID(validating: text)
        } catch {
            throw ValidationError(error.description)
        }
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a group you own; prints its id.")
        @OptionGroup var options: ClientOptions
        @Argument(help: "The group's name.") var name: String
        @Option(help: "A description.") var description = ""
        @Option(help: "A full name.") var fullName = ""
        @Option(help: "An image file (PNG, JPEG, GIF or WebP, at most 64 KiB).") var image: String?

        func run() async throws {
            let picture = try image.map(GroupCommand.image)
            let client = try GroupCommand.open(options)
            let record = try await client.createGroup(
                name: name, description: description, fullName: fullName, image: picture)
            await client.disconnect()
            let json = GroupJSON(record, me: client.inboxID)
            options.output.emit(json) { "created group \"\(name.terminalSafe)\"\ngroup id: \(record.groupID)" }
        }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Invite people (admin): they are invited until they accept (`rally group accept`).",
            discussion:
                "With --direct they are members at once and get their welcome by direct message, without being asked.")
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String
        @Argument(help: "The inbox ids of the people to invite.") var inboxIDs: [String]
        @Option(help: "observer, member, moderator, admin or owner.") var role = "member"
        @Flag(help: "Add them at once instead of inviting them.") var direct = false

        func run() async throws {
            guard let role = GroupRole(name: role) else {
                throw ValidationError("--role must be observer, member, moderator, admin or owner")
            }
            let inboxes = try GroupCommand.inboxes(inboxIDs)
            let client = try GroupCommand.open(options)
            var record: GroupRecord
            if direct {
                record = try await client.group(group)
                for inbox in inboxes { record = try await client.addMember(inbox, role: role, to: group) }
            } else {
                record = try await client.groupInvitations.invite(inboxes, role: role, to: group)
            }
            await client.disconnect()
            let name = record.state.profile.name.terminalSafe
            options.output.emit(GroupJSON(record, me: client.inboxID)) {
                direct
                    ? "added \(inboxes.map(\.rawValue).joined(separator: ", ")) as \(role) to \"\(name)\"; welcome sent"
                    : "invited \(inboxes.map(\.rawValue).joined(separator: ", ")) to \"\(name)\" as \(role); they are invited until they accept"
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove members in one change; the group moves to a new key they do not get.")
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String
        @Argument(help: "The members' inbox ids.") var inboxIDs: [String]
        @Flag(help: "Also refuse their later join requests.") var ban = false
        @Flag(help: "Also delete their messages on every member's device.") var withMessages = false

        func run() async throws {
            let inboxes = try GroupCommand.inboxes(inboxIDs)
            let client = try GroupCommand.open(options)
            let record = try await client.removeMembers(inboxes, from: group, ban: ban, withMessages: withMessages)
            await client.disconnect()
            options.output.emit(GroupJSON(record, me: client.inboxID)) {
                "removed \(inboxes.count) member\(inboxes.count == 1 ? "" : "s") from \"\(record.state.profile.name.terminalSafe)\"\(withMessages ? " with their messages" : ""); now at epoch \(record.state.epoch)"
            }
        }
    }

    struct Explode: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "End a group for good (owner only); later join requests are told it is gone.")
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String

        func run() async throws {
            let client = try GroupCommand.open(options)
            try await client.explodeGroup(group)
            let record = try await client.group(group)
            await client.disconnect()
            options.output.emit(GroupJSON(record, me: client.inboxID)) {
                "exploded \"\(record.state.profile.name.terminalSafe)\"; it accepts no further changes"
            }
        }
    }

    struct Send: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Send a text message to a group.")
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String
        @Argument(help: "The text to send.") var text: String

        func run() async throws {
            let client = try GroupCommand.open(options)
            let message = try await client.sendGroupText(text, to: group)
            await client.disconnect()
            options.output.emit(MessageJSON(message)) { "sent \(message.id) (log seq \(message.seq ?? 0))" }
        }
    }

    struct Read: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Fetch a group's new messages and print them.",
            discussion: "With --follow, stays connected and prints messages as they arrive.")
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String
        @Flag(help: "Stay connected and print messages as they arrive.") var follow = false
        @Flag(help: "Print every stored message of the group, not only new ones.") var all = false

        func run() async throws {
            let client = try GroupCommand.open(options)
            _ = try await client.syncInbox()
            let output = options.output
            let groupID = try await client.group(group).groupID
            if follow {
                let status = ConnectionStatusLines.start(client, output: output)
                defer { status.cancel() }
                try await client.followGroup(groupID, untilCaughtUp: false) { event in
                    Read.print(event, output: output, client: client)
                }
                return
            }
            let report = try await client.syncGroup(groupID)
            await client.disconnect()
            let messages = (all ? try await client.groupMessages(in: groupID) : report.messages).map {
                client.asShown($0)
            }
            for event in report.events { Read.print(event, output: output, client: client, messagesToo: false) }
            if output.json {
                output.emit(messages.map(MessageJSON.init)) { "" }
            } else if messages.isEmpty {
                Output.write("no new messages")
            } else {
                for message in messages { Output.write(MessageJSON.human(message)) }
            }
        }

        static func print(_ event: GroupLogEvent, output: Output, client: RallyClient, messagesToo: Bool = true) {
            switch event {
            case .message(let received) where messagesToo:
                let message = client.asShown(received)
                output.emit(MessageJSON(message)) { MessageJSON.human(message) }
            case .rejected(let seq, let reason):
                Output.warn("warning: dropped group log entry #\(seq): \("\(reason)".terminalSafe)")
            case .commit(let seq, _, let author, .rejected(let reason)):
                Output.warn("note: change #\(seq) by \(author) was not applied: \("\(reason)".terminalSafe)")
            case .diverged(let seq, let reason):
                Output.warn(
                    "warning: the relay showed this device a different history of the group (#\(seq)): \(reason); nothing more is sent into it"
                )
            default:
                break
            }
        }
    }

    struct Members: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List a group's members: inbox id, name, role, status.")
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String

        func run() async throws {
            let client = try GroupCommand.open(options)
            _ = try await client.syncInbox()
            let groupID = try await client.group(group).groupID
            try await client.syncGroup(groupID)
            await client.disconnect()
            let record = try await client.group(groupID)
            let members = record.state.roster.map {
                MemberJSON(
                    inboxId: $0.inboxID.rawValue, name: $0.identity.displayName, role: $0.role.description,
                    status: $0.status.rawValue)
            }
            if options.json {
                options.output.emit(members) { "" }
            } else {
                Output.write(
                    "\(record.state.profile.name.terminalSafe) — epoch \(record.state.epoch), you are \(record.status.rawValue)"
                )
                for member in members { Output.write(member.human) }
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List your groups (after picking up new welcomes).")
        @OptionGroup var options: ClientOptions
        @Flag(help: "Do not contact the relay; list what is stored.") var offline = false

        func run() async throws {
            let client = try GroupCommand.open(options)
            if !offline {
                _ = try await client.syncInbox()
                for group in try await client.groups() where group.status == .active {
                    try await client.syncGroup(group.groupID)
                }
                await client.disconnect()
            }
            let groups = try await client.groups().map { GroupJSON($0, me: client.inboxID) }
            if options.json {
                options.output.emit(groups) { "" }
            } else if groups.isEmpty {
                Output.write("no groups yet: create one with `rally group create NAME`")
            } else {
                for group in groups { Output.write(group.human) }
            }
        }
    }
}
