import Foundation
public import RallyCrypto

/// The joiner's side of joining by invite, as a pure value: states, events
/// and the rule for each transition. The shell (the client) performs the
/// effects and feeds results back as events.
public struct JoinStateMachine: Sendable, Equatable {
    public enum State: Sendable, Equatable {
        case uninitialized
        case validating
        case validated(InviteSummary)
        case joining(InviteSummary)
        /// The request reached the group; an admin must approve it.
        case awaitingApproval(InviteSummary)
        case joined(groupID: String, existing: Bool)
        case joinFailed(JoinFailure)
        case cancelled

        public var isFinal: Bool {
            switch self {
            case .joined, .joinFailed, .cancelled: true
            default: false
            }
        }

        /// What to tell the user; nil while nothing is going on.
        public var userMessage: String? {
            switch self {
            case .uninitialized: nil
            case .validating: "Checking the invite…"
            case .validated, .joining: "Waiting for an admin of the group to answer"
            case .awaitingApproval: "Waiting for approval"
            case .joined(_, let existing): existing ? "You are already in this conversation" : "Joined"
            case .joinFailed(let failure): failure.userMessage
            case .cancelled: "Join cancelled"
            }
        }
    }

    /// What the joiner knows of the invite it is using.
    public struct InviteSummary: Sendable, Equatable, Codable {
        public let tag: String
        /// Join errors and welcomes are accepted only from here.
        public let inviterInbox: InboxID
        public let name: String
        /// Set once the group put the joiner in its approval queue.
        public var approval: PendingApproval?

        public init(tag: String, inviterInbox: InboxID, name: String, approval: PendingApproval? = nil) {
            self.tag = tag
            self.inviterInbox = inviterInbox
            self.name = name
            self.approval = approval
        }

        /// The group whose queue the joiner waits in, and the moderators and
        /// above who may answer (their refusal counts, like the inviter's).
        public struct PendingApproval: Sendable, Equatable, Codable {
            public let groupID: String
            public let approvers: [InboxID]

            public init(groupID: String, approvers: [InboxID]) {
                self.groupID = groupID
                self.approvers = approvers
            }
        }

        /// Whether an answer from `sender` counts: the inviter's, or once
        /// queued, an approver's.
        func answers(from sender: InboxID) -> Bool {
            sender == inviterInbox || approval?.approvers.contains(sender) == true
        }
    }

    public enum JoinFailure: Sendable, Equatable {
        /// The invite failed local validation; nothing was sent.
        case invalidInvite(InviteError)
        /// The inviter's client answered with a typed error.
        case rejected(JoinErrorType, reason: String?)

        public var userMessage: String {
            switch self {
            case .invalidInvite(let error): error.description
            case .rejected(let type, _): type.joinerMessage
            }
        }
    }

    public enum Event: Sendable, Equatable {
        case validate
        case validationSucceeded(InviteSummary)
        case validationFailed(InviteError)
        case requestSent
        case approvalPending(tag: String, from: InboxID, approval: InviteSummary.PendingApproval? = nil)
        case welcomeReceived(tag: String, groupID: String, from: InboxID)
        case alreadyMember(groupID: String)
        case errorReceived(InviteJoinError, from: InboxID)
        case cancel
        case reset
    }

    /// Why an event changed nothing; logged by the shell, never shown.
    public enum Ignored: Sendable, Equatable {
        case notApplicable
        case otherInviteTag
        case notFromInviter
        case alreadyFinal
    }

    public private(set) var state: State = .uninitialized

    public init(state: State = .uninitialized) {
        self.state = state
    }

    /// Applies an event. Returns nil when it changed the state, or why it
    /// was ignored.
    @discardableResult
    public mutating func apply(_ event: Event) -> Ignored? {
        switch (state, event) {
        case (_, .reset):
            state = .uninitialized
        case (.uninitialized, .validate), (.joinFailed(.invalidInvite), .validate), (.cancelled, .validate):
            state = .validating
        case (.validating, .validationSucceeded(let invite)):
            state = .validated(invite)
        case (.validating, .validationFailed(let error)):
            state = .joinFailed(.invalidInvite(error))
        case (.validated(let invite), .requestSent):
            state = .joining(invite)
        case (.validated, .alreadyMember(let groupID)), (.joining, .alreadyMember(let groupID)):
            state = .joined(groupID: groupID, existing: true)
        case (.joining(let invite), .approvalPending(let tag, let from, let approval)):
            if let ignored = Self.check(invite, tag: tag, from: from) { return ignored }
            var queued = invite
            queued.approval = approval ?? invite.approval
            state = .awaitingApproval(queued)
        case (.joining(let invite), .welcomeReceived(let tag, let groupID, _)),
            (.awaitingApproval(let invite), .welcomeReceived(let tag, let groupID, _)):
            if let ignored = Self.check(invite, tag: tag, from: nil) { return ignored }
            state = .joined(groupID: groupID, existing: false)
        case (.joining(let invite), .errorReceived(let error, let from)),
            (.awaitingApproval(let invite), .errorReceived(let error, let from)),
            (.validated(let invite), .errorReceived(let error, let from)):
            if let ignored = Self.check(invite, tag: error.inviteTag, from: from) { return ignored }
            state = .joinFailed(.rejected(error.errorType, reason: error.reason))
        case (.validating, .cancel), (.validated, .cancel), (.joining, .cancel), (.awaitingApproval, .cancel):
            state = .cancelled
        case (let current, _) where current.isFinal:
            return .alreadyFinal
        default:
            return .notApplicable
        }
        return nil
    }

    /// An answer counts only for the invite in use, and (for errors and
    /// approvals) only from the inviter it was sent to. A welcome is
    /// checked by its tag; who may send it is the group's business
    /// (any admin), checked when the welcome is accepted.
    private static func check(_ invite: InviteSummary, tag: String, from: InboxID?) -> Ignored? {
        guard tag == invite.tag else { return .otherInviteTag }
        if let from, !invite.answers(from: from) { return .notFromInviter }
        return nil
    }
}
