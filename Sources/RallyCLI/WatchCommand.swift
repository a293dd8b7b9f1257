import ArgumentParser
import Foundation
import RallyCore

/// `rally watch`: keeps a client online so its groups stay joinable.
struct WatchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch",
        abstract: "Stay online: receive messages, follow groups and answer join requests as an admin.",
        discussion: "Runs until interrupted. With --json, prints one JSON object per event.")
    @OptionGroup var options: ClientOptions

    struct EventJSON: Encodable {
        let event: String
        let groupId: String?
        let requestId: String?
        let joiner: String?
        let outcome: String?
        let detail: String?
        let errorSent: Bool?
        let message: MessageJSON?
        let groups: [String]?
        let inviteInboxes: [String]?

        init(
            event: String, groupId: String? = nil, requestId: String? = nil, joiner: String? = nil,
            outcome: String? = nil, detail: String? = nil, errorSent: Bool? = nil, message: MessageJSON? = nil,
            groups: [String]? = nil, inviteInboxes: [String]? = nil
        ) {
            self.event = event
            self.groupId = groupId
            self.requestId = requestId
            self.joiner = joiner
            self.outcome = outcome
            self.detail = detail
            self.errorSent = errorSent
            self.message = message
            self.groups = groups
            self.inviteInboxes = inviteInboxes
        }
    }

    static func describe(_ decision: JoinRequestDecision?) -> (outcome: String, detail: String?) {
        switch decision {
        case nil: ("dropped", "could not be opened")
        case .duplicate?: ("duplicate", nil)
        case .ignoredBlockedSender?: ("ignored", "sender is blocked")
        case .block(let reason)?: ("blocked", reason)
        case .reject(let type, let reason)?: (type.rawValue, reason)
        case .alreadyMember?: ("already_member", nil)
        case .admit(let admission)? where admission.approval: ("pending", "waits for approval (as \(admission.role))")
        case .admit(let admission)?: ("admitted", "as \(admission.role)")
        case .awaitingApproval?: ("pending", "still waits for approval")
        case .declineInvitation?: ("declined", "the invitee turned the invitation down")
        case .notForThisClient(let reason)?: ("ignored", reason)
        }
    }

    static func describe(_ outcome: GroupOutcome) -> String {
        switch outcome {
        case .duplicate: return "already applied"
        case .rejected(let rejection): return "refused: \(rejection)"
        case .applied(let effects):
            let parts = effects.compactMap { effect -> String? in
                switch effect {
                case .created: "group created"
                case .memberAdded(let inbox, let role): "\(inbox.rawValue.prefix(8))… added as \(role)"
                case .memberRemoved(let inbox): "\(inbox.rawValue.prefix(8))… removed"
                case .messagesDeleted(let inboxes): "messages of \(inboxes.count) member(s) deleted"
                case .blockedForAll(let inboxes, let blocked):
                    "\(inboxes.count) member(s) \(blocked ? "blocked" : "unblocked") for all"
                case .welcomeChanged: "welcome message changed"
                case .memberLeft(let inbox): "\(inbox.rawValue.prefix(8))… left"
                case .roleChanged(let inbox, let role): "\(inbox.rawValue.prefix(8))… is now \(role)"
                case .profileChanged: "profile changed"
                case .invitesSetUp: "invites set up"
                case .inviteSeedShared: "invite keys shared with a new admin"
                case .inviteTagRotated: "outstanding invites revoked"
                case .exploded: "group exploded"
                case .deleted: "group deleted by the owner"
                case .groupLinkChanged: "group link changed"
                case .admissionChanged(let admission): "admission is now \(admission.rawValue)"
                case .pendingAdded(let inbox): "\(inbox.rawValue.prefix(8))… waits for approval"
                case .pendingAdmitted: nil
                case .preferencesChanged: "preferences changed"
                case .pendingRejected(let inbox): "\(inbox.rawValue.prefix(8))… turned away"
                case .invited(let inbox, let role): "\(inbox.rawValue.prefix(8))… invited as \(role)"
                case .invitationWithdrawn(let inbox, let declined):
                    "\(inbox.rawValue.prefix(8))… invitation \(declined ? "declined" : "withdrawn")"
                case .epochAdvanced(let epoch, _, let fresh): "epoch \(epoch)\(fresh == nil ? "" : " (new key)")"
                }
            }
            return parts.joined(separator: ", ")
        }
    }

    func run() async throws {
        let client = try options.openClient()
        let output = options.output
        output.emit(EventJSON(event: "started")) { "watching as \(client.inboxID); interrupt to stop" }
        let status = ConnectionStatusLines.start(client, output: output)
        defer { status.cancel() }
        try await client.watch { event in
            switch event {
            case .inbox(.message(let message)):
                output.emit(EventJSON(event: "message", message: MessageJSON(message))) {
                    MessageJSON.human(message)
                }
            case .inbox(.rejected(let rejection)):
                output.emit(EventJSON(event: "rejected", detail: rejection.description)) { "\(rejection)".terminalSafe }
            case .inbox(.caughtUp):
                break
            case .group(let groupID, .message(let received)):
                let message = client.asShown(received)
                output.emit(EventJSON(event: "group_message", groupId: groupID, message: MessageJSON(message))) {
                    "[\(groupID.prefix(8))] \(MessageJSON.human(message))"
                }
            case .group(let groupID, .commit(_, _, let author, let outcome)):
                let detail = Self.describe(outcome)
                output.emit(EventJSON(event: "group_commit", groupId: groupID, detail: detail)) {
                    "[\(groupID.prefix(8))] change by \(author.rawValue.prefix(8))…: \(detail.terminalSafe)"
                }
            case .group(let groupID, .diverged(let seq, let reason)):
                output.emit(EventJSON(event: "group_diverged", groupId: groupID, detail: "#\(seq): \(reason)")) {
                    "[\(groupID.prefix(8))] the relay showed this device a different history (#\(seq)): \(reason); nothing more is sent into this group"
                }
            case .group(let groupID, .deletedOnRelay):
                output.emit(EventJSON(event: "group_deleted", groupId: groupID, detail: "deleted on the relay")) {
                    "[\(groupID.prefix(8))] the group was deleted"
                }
            case .group(let groupID, .rejected(let seq, let reason)):
                output.emit(EventJSON(event: "group_rejected", groupId: groupID, detail: "#\(seq): \(reason)")) {
                    "[\(groupID.prefix(8))] dropped entry #\(seq): \("\(reason)".terminalSafe)"
                }
            case .joinRequest(let report):
                let (outcome, detail) = Self.describe(report.decision)
                output.emit(
                    EventJSON(
                        event: "join_request", groupId: report.groupID, requestId: report.requestID,
                        joiner: report.joiner?.rawValue, outcome: outcome, detail: detail,
                        errorSent: report.errorSent)
                ) {
                    let who = report.joiner.map { "\($0.rawValue.prefix(8))…" } ?? "unknown sender"
                    let sent = report.errorSent ? " (error sent)" : ""
                    return "[\(report.groupID.prefix(8))] join request from \(who): \(outcome)"
                        + (detail.map { " — \($0.terminalSafe)" } ?? "") + sent
                }
            case .following(let groups, let inviteInboxes):
                output.emit(EventJSON(event: "following", groups: groups, inviteInboxes: inviteInboxes)) {
                    "following \(groups.count) group(s); answering join requests for \(inviteInboxes.count)"
                }
            }
        }
    }
}
