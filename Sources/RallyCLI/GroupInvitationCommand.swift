import ArgumentParser
import Foundation
import RallyCore
import RallyCrypto

/// Invitations a person accepts: `rally group add` invites, the invitee
/// lists, accepts or declines.
extension GroupCommand {
    struct InvitationJSON: Encodable {
        let id: String
        let groupName: String
        let description: String
        let role: String
        let invitedBy: String
        let invitedByName: String
        let receivedAt: Date
        let answer: String
        let result: String?

        init(_ invitation: ReceivedInvitation) {
            id = invitation.id
            groupName = invitation.groupName
            description = invitation.invite.payload.description_p
            role = invitation.role.description
            invitedBy = invitation.invitedBy.inboxID.rawValue
            invitedByName = invitation.invitedBy.displayName
            receivedAt = invitation.receivedAt
            switch invitation.answer {
            case .open:
                answer = "open"
                result = nil
            case .declined:
                answer = "declined"
                result = nil
            case .accepted(let attempt):
                answer = "accepted"
                result = GroupCommand.joinResult(attempt)
            }
        }

        var human: String {
            "\(id.prefix(8))  \"\(groupName.terminalSafe)\" as \(role), from \(invitedByName.terminalSafe): \(result ?? answer)"
        }
    }

    /// The seed's `JoinGroupResult` for an accepted invitation.
    static func joinResult(_ attempt: JoinAttempt) -> String {
        switch (attempt.phase, attempt.errorType) {
        case (.joined, _): "joined"
        case (.failed, .invitationRemoved?): "invitation_removed"
        case (.failed, .conversationNotFound?), (.failed, .conversationExpired?): "group_not_found"
        case (.failed, let type): type?.rawValue ?? "failed"
        case (.cancelled, _): "cancelled"
        default: "waiting"
        }
    }

    struct Invitations: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the group invitations you received and what became of them.")
        @OptionGroup var options: ClientOptions
        @Flag(help: "Do not contact the relay; list what is stored.") var offline = false

        func run() async throws {
            let client = try GroupCommand.open(options)
            if !offline { _ = try await client.syncInbox() }
            let invitations = try client.groupInvitations.received().map(InvitationJSON.init)
            await client.disconnect()
            options.output.emit(invitations) {
                invitations.isEmpty ? "no invitations" : invitations.map(\.human).joined(separator: "\n")
            }
        }
    }

    struct Accept: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Accept a group invitation and wait until joined.",
            discussion:
                "Exit status: 0 joined; 1 not joined (invitation_removed: it was withdrawn; group_not_found: the group is gone); 3 still waiting when --timeout passed."
        )
        @OptionGroup var options: ClientOptions
        @Argument(help: "The invitation's id (or a prefix) or the group's name, as `rally group invitations` shows.")
        var invitation: String
        @Option(help: "Stop waiting after this many seconds (the join stays under way).") var timeout: Double?

        func run() async throws {
            let client = try GroupCommand.open(options)
            _ = try await client.syncInbox()
            let started = try await client.groupInvitations.accept(invitation)
            let final = try await client.waitForJoin(
                requestID: started.requestID, timeout: timeout.map { .milliseconds(Int($0 * 1000)) })
            await client.disconnect()
            let result = GroupCommand.joinResult(final)
            options.output.emit(["result": result, "groupId": final.groupID ?? "", "message": final.userMessage]) {
                switch result {
                case "joined": "joined \"\(final.invite.name.terminalSafe)\""
                case "invitation_removed": "invitation_removed: \(final.userMessage)"
                case "group_not_found": "group_not_found: \(final.userMessage)"
                default: final.userMessage
                }
            }
            if !final.isFinal { throw JoinCommand.waitingExit }
            if final.phase != .joined { throw JoinCommand.failedExit }
        }
    }

    struct Decline: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Turn a group invitation down.")
        @OptionGroup var options: ClientOptions
        @Argument(help: "The invitation's id (or a prefix) or the group's name.") var invitation: String

        func run() async throws {
            let client = try GroupCommand.open(options)
            _ = try await client.syncInbox()
            let found = try client.groupInvitations.invitation(invitation)
            try await client.groupInvitations.decline(invitation)
            await client.disconnect()
            options.output.emit(["result": "declined", "id": found.id]) {
                "declined the invitation to \"\(found.groupName.terminalSafe)\""
            }
        }
    }
}
