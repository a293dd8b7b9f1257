import ArgumentParser
import Foundation
import RallyCore
import RallyCrypto

/// `rally join`: join a group with an invite link, and follow or cancel the
/// join across invocations.
struct JoinCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "join", abstract: "Join a group with an invite link, QR payload or slug.",
        discussion: """
            Exit status: 0 joined (or request sent, with --no-wait), 1 the join failed, 2 cancelled, \
            3 still waiting when --timeout passed.
            """,
        subcommands: [Start.self, Status.self, Cancel.self], defaultSubcommand: Start.self)

    static let failedExit = ExitCode(1)
    static let cancelledExit = ExitCode(2)
    static let waitingExit = ExitCode(3)

    struct AttemptJSON: Encodable {
        let requestId: String
        let state: String
        let inviteTag: String
        let inviteName: String
        let joinInbox: String
        let groupId: String?
        let existing: Bool
        let errorType: String?
        let reason: String?
        let message: String
        let startedAt: Date
        let updatedAt: Date

        init(_ attempt: JoinAttempt) {
            requestId = attempt.requestID
            state = attempt.phase.rawValue
            inviteTag = attempt.invite.tag
            inviteName = attempt.invite.name
            joinInbox = attempt.invite.inviterInbox.rawValue
            groupId = attempt.groupID
            existing = attempt.existing
            errorType = attempt.errorType?.rawValue
            reason = attempt.reason
            message = attempt.userMessage
            startedAt = attempt.startedAt
            updatedAt = attempt.updatedAt
        }
    }

    static func human(_ attempt: JoinAttempt) -> String {
        let name = attempt.invite.name.isEmpty ? "the group" : "\"\(attempt.invite.name.terminalSafe)\""
        switch attempt.phase {
        case .validated: return "invite to \(name) is valid; sending the join request"
        case .joining: return "join request for \(name) sent; waiting for an admin of the group"
        case .awaitingApproval: return "waiting for an admin to approve your request to join \(name)"
        case .joined:
            let id = attempt.groupID ?? ""
            return attempt.existing
                ? "you are already in \(name) (group id \(id))" : "joined \(name) (group id \(id))"
        case .failed: return "could not join \(name): \(attempt.userMessage.terminalSafe)"
        case .cancelled: return "join of \(name) cancelled"
        }
    }

    static func exitCode(for attempt: JoinAttempt) -> ExitCode {
        switch attempt.phase {
        case .joined: .success
        case .failed: failedExit
        case .cancelled: cancelledExit
        case .validated, .joining, .awaitingApproval: waitingExit
        }
    }

    struct Start: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "start",
            abstract: "Validate an invite, send a join request and wait until joined or refused.")
        @OptionGroup var options: ClientOptions
        @Argument(help: "rally://join/<slug>, https://<host>/join/<slug>, or the bare slug.") var link: String
        @Flag(help: "Send the request and return; check later with `rally join status`.") var noWait = false
        @Option(help: "Stop waiting after this many seconds (the join stays under way).") var timeout: Double?
        @Flag(help: "Show what the link says about the group (name, description, image digest) and send nothing.")
        var preview = false

        static func start(_ client: RallyClient, _ link: String) async -> Result<JoinAttempt, RallyClientError> {
            do throws(RallyClientError) {
                return .success(try await client.startJoin(link))
            } catch {
                return .failure(error)
            }
        }

        func run() async throws {
            if preview { return try Self.preview(link, output: options.output) }
            try await Self.join(link, options: options, noWait: noWait, timeout: timeout)
        }

        struct PreviewJSON: Encodable {
            let name: String
            let description: String
            let imageSha256: String?
            let role: String
            let approval: Bool
            let expiresAt: Date?
            let singleUse: Bool
            let issuer: String
        }

        /// Checks the invite here (signature, expiry) and shows its
        /// preview; nothing reaches the relay.
        static func preview(_ link: String, output: Output) throws {
            let invite: Invite
            do {
                invite = try Invite.parse(link, now: Date())
            } catch {
                output.emit(["state": "failed", "error": "invalid_invite", "message": error.description]) {
                    "this invite cannot be used: \(error.description.terminalSafe)"
                }
                throw JoinCommand.failedExit
            }
            let payload = invite.payload
            let json = PreviewJSON(
                name: payload.name, description: payload.description_p,
                imageSha256: payload.imageSha256.isEmpty ? nil : payload.imageSha256.hexString,
                role: (GroupRole(wire: payload.role) ?? .member).description, approval: payload.requiresApproval,
                expiresAt: invite.expiresAt, singleUse: payload.singleUse, issuer: invite.issuer.displayName)
            output.emit(json) {
                var lines = ["\(json.name.terminalSafe)"]
                if !json.description.isEmpty { lines.append(json.description.terminalSafe) }
                if let digest = json.imageSha256 { lines.append("image: sha256 \(digest)") }
                lines.append(
                    "joins as \(json.role)\(json.approval ? " after a moderator's approval" : ""); invited by \(json.issuer.terminalSafe)"
                )
                return lines.joined(separator: "\n")
            }
        }

        /// What `rally join LINK` does; `rally open` calls it for invite links.
        static func join(_ link: String, options: ClientOptions, noWait: Bool, timeout: Double?) async throws {
            let client = try options.openClient()
            let output = options.output
            output.emit(["state": "validating"]) { "checking the invite…" }
            let started = await Self.start(client, link)
            let attempt: JoinAttempt
            switch started {
            case .success(let sent):
                attempt = sent
            case .failure(.invite(.invalidInvite(let problem))):
                await client.disconnect()
                output.emit(["state": "failed", "error": "invalid_invite", "message": problem.description]) {
                    "this invite cannot be used: \(problem.description.terminalSafe). Nothing was sent."
                }
                throw JoinCommand.failedExit
            case .failure(let error):
                await client.disconnect()
                throw error
            }
            output.emit(AttemptJSON(attempt)) { JoinCommand.human(attempt) }
            if noWait {
                await client.disconnect()
                return
            }
            let final = try await client.waitForJoin(
                requestID: attempt.requestID, timeout: timeout.map { .milliseconds(Int($0 * 1000)) }
            ) { changed in
                output.emit(AttemptJSON(changed)) { JoinCommand.human(changed) }
            }
            await client.disconnect()
            if !final.isFinal {
                Output.warn("still waiting; see `rally join status` later")
            }
            let code = JoinCommand.exitCode(for: final)
            if code != ExitCode.success { throw code }
        }
    }

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show your joins, after reading any answer that arrived.")
        @OptionGroup var options: ClientOptions
        @Argument(help: "A request id (or prefix); default: every join.") var requestID: String?
        @Flag(help: "Do not contact the relay; show what is stored.") var offline = false

        func run() async throws {
            let client = try options.openClient()
            if !offline {
                do {
                    _ = try await client.syncInbox()
                } catch {
                    Output.warn("could not reach the relay (\(error)); showing what is stored")
                }
                await client.disconnect()
            }
            let attempts: [JoinAttempt]
            if let requestID {
                attempts = [try await client.joinAttempt(requestID)]
            } else {
                attempts = try await client.joinAttempts()
            }
            if options.json {
                options.output.emit(attempts.map(AttemptJSON.init)) { "" }
            } else if attempts.isEmpty {
                Output.write("no joins; start one with `rally join LINK`")
            } else {
                for attempt in attempts {
                    Output.write("\(attempt.requestID.prefix(12))  \(JoinCommand.human(attempt))")
                }
            }
            if requestID != nil, let attempt = attempts.first {
                let code = JoinCommand.exitCode(for: attempt)
                if code != ExitCode.success { throw code }
            }
        }
    }

    struct Cancel: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Cancel a join under way; an answer arriving later is ignored.")
        @OptionGroup var options: ClientOptions
        @Argument(help: "A request id (or prefix); default: the newest join under way.") var requestID: String?

        func run() async throws {
            let client = try options.openClient()
            let target: String
            if let requestID {
                target = requestID
            } else if let current = try await client.currentJoin() {
                target = current.requestID
            } else {
                throw ValidationError("no join is under way; see `rally join status`")
            }
            let attempt = try await client.cancelJoin(target)
            guard attempt.phase == .cancelled else {
                throw ValidationError("that join already ended: \(JoinCommand.human(attempt))")
            }
            options.output.emit(AttemptJSON(attempt)) { JoinCommand.human(attempt) }
        }
    }
}
