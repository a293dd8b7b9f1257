import ArgumentParser
import Foundation
import RallyCore
import RallyCrypto
import RallyQR

/// `rally invite`: signed invite links and QR codes for a group.
struct InviteCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "invite", abstract: "Create and revoke signed invite links and QR codes.",
        subcommands: [Create.self, Revoke.self, Blocked.self, Unblock.self])

    struct InviteJSON: Encodable {
        let groupId: String
        let slug: String
        let link: String
        let webLink: String
        let inviteTag: String
        let name: String
        let expiresAt: Date?
        let singleUse: Bool
        let maxUses: UInt32
        let role: String
        let qrPng: String?
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print an invite link to a group you administer.",
            discussion: """
                Anyone with the link can ask to join; any admin's client that is online (`rally watch`) \
                answers: it admits them, or tells them why not.
                """)
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String
        @Option(help: "Expire after a duration: 30m, 12h, 7d, or seconds.") var expires: String?
        @Flag(help: "Admit one person only.") var singleUse = false
        @Option(help: "Admit at most N people.") var maxUses: UInt32?
        @Option(help: "Role the invite grants: observer, member, moderator or admin.") var role = "member"
        @Option(help: "Name shown to the joiner (default: the group's name).") var name: String?
        @Flag(help: "Joiners wait for a moderator's approval (`rally group pending`).") var approval = false
        @Flag(help: "Draw the link as a QR code in the terminal (dark blocks on a light background).") var qr = false
        @Flag(help: "With --qr: draw for a terminal with light text on a dark background.") var qrInverted = false
        @Option(help: "Write the link as a QR code PNG to this file.") var qrPng: String?

        func validate() throws {
            if singleUse, maxUses != nil { throw ValidationError("use --single-use or --max-uses, not both") }
            if maxUses == 0 { throw ValidationError("--max-uses must be at least 1") }
            if let expires { _ = try Self.duration(expires) }
        }

        static func duration(_ text: String, option: String = "--expires") throws -> TimeInterval {
            let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
            let trimmed = text.trimmingCharacters(in: .whitespaces).lowercased()
            var number = trimmed
            var scale = 1.0
            if let last = trimmed.last, let unit = units[last] {
                number = String(trimmed.dropLast())
                scale = unit
            }
            guard let value = Double(number), value > 0, value.isFinite else {
                throw ValidationError("\(option) takes a duration like 30m, 12h or 7d, not \"\(text)\"")
            }
            return value * scale
        }

        func run() async throws {
            guard let grantedRole = GroupRole(name: role) else {
                throw ValidationError("--role must be observer, member, moderator or admin")
            }
            let client = try options.openClient()
            let created = try await client.createInvite(
                in: group,
                options: InviteOptions(
                    expiresIn: try expires.map { try Self.duration($0) }, singleUse: singleUse, maxUses: maxUses ?? 0,
                    role: grantedRole, name: name, admission: approval ? .approval : .auto))
            await client.disconnect()
            var code: QRCode?
            if qr || qrPng != nil {
                do {
                    code = try QRCode.encode(created.webLink)
                } catch {
                    throw ValidationError("the link does not fit in a QR code: \(error)")
                }
            }
            if let qrPng, let code {
                let url = URL(fileURLWithPath: qrPng)
                do {
                    try code.pngData().write(to: url, options: .atomic)
                } catch {
                    throw ValidationError("cannot write \(qrPng): \(error.localizedDescription)")
                }
            }
            let payload = created.invite.payload
            let json = InviteJSON(
                groupId: created.groupID, slug: created.slug, link: created.appLink, webLink: created.webLink,
                inviteTag: created.invite.tagText, name: payload.name, expiresAt: created.invite.expiresAt,
                singleUse: payload.singleUse, maxUses: payload.maxUses, role: grantedRole.description, qrPng: qrPng)
            options.output.emit(json) {
                var lines = [created.appLink, created.webLink]
                var limits: [String] = []
                if let expiresAt = created.invite.expiresAt {
                    limits.append("expires \(ISO8601DateFormatter.rally.string(from: expiresAt))")
                }
                if payload.singleUse {
                    limits.append("single use")
                } else if payload.maxUses > 0 {
                    limits.append("up to \(payload.maxUses) people")
                }
                limits.append("joins as \(grantedRole)")
                if approval { limits.append("after a moderator's approval") }
                lines.append("invite to \"\(payload.name.terminalSafe)\": \(limits.joined(separator: ", "))")
                if let qrPng { lines.append("QR code written to \(qrPng)") }
                if qr, let code { lines.append(code.terminalText(invert: qrInverted)) }
                return lines.joined(separator: "\n")
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Invalidate every outstanding invite of a group (by rotating its invite tag).")
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String

        func run() async throws {
            let client = try options.openClient()
            try await client.revokeInvites(in: group)
            let record = try await client.group(group)
            await client.disconnect()
            options.output.emit(["groupId": record.groupID, "inviteTag": record.state.inviteTag.hexString]) {
                "revoked every outstanding invite to \"\(record.state.profile.name.terminalSafe)\"; requests with them are answered \"invite revoked\""
            }
        }
    }

    struct Blocked: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List who this device blocked from a group's join requests, and why.",
            discussion: """
                Only a sender whose own request was malformed is blocked, and only for that group; \
                someone who used a forged invite is answered, never blocked.
                """)
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String

        func run() async throws {
            let client = try options.openClient()
            let record = try await client.group(group)
            let blocked = try await client.blockedJoinSenders(in: record.groupID)
            options.output.emit(blocked.map { ["inboxId": $0.inbox, "reason": $0.reason] }) {
                blocked.isEmpty
                    ? "nobody is blocked from joining \"\(record.state.profile.name)\""
                    : blocked.map { "\($0.inbox)  \($0.reason)" }.joined(separator: "\n")
            }
        }
    }

    struct Unblock: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Let an inbox's join requests to a group be answered again.")
        @OptionGroup var options: ClientOptions
        @Argument(help: "Group id (or a unique prefix, or the name).") var group: String
        @Argument(help: "The blocked inbox id.") var inbox: String

        func run() async throws {
            let client = try options.openClient()
            let target = try GroupCommand.inbox(inbox)
            let lifted = try await client.unblockJoinSender(target, in: group)
            options.output.emit(["inboxId": target.rawValue, "unblocked": lifted ? "true" : "false"]) {
                lifted
                    ? "\(target) may ask to join again"
                    : "\(target) was not blocked from this group"
            }
        }
    }
}
