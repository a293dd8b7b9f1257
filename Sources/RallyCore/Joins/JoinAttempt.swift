public import Foundation
import RallyCrypto

/// A join this identity started with an invite, as persisted between CLI
/// invocations. The state machine is rebuilt from it and written back
/// after every event.
public struct JoinAttempt: Sendable, Equatable, Codable {
    public enum Phase: String, Sendable, Codable {
        case validated, joining, awaitingApproval, joined, failed, cancelled
    }

    /// Hex of the request id, which is also the join request's message id.
    public let requestID: String
    public var invite: JoinStateMachine.InviteSummary
    public let slug: String
    public var phase: Phase
    public var groupID: String?
    public var existing: Bool
    public var errorType: JoinErrorType?
    public var reason: String?
    public let startedAt: Date
    public var updatedAt: Date

    public var machine: JoinStateMachine {
        switch phase {
        case .validated: JoinStateMachine(state: .validated(invite))
        case .joining: JoinStateMachine(state: .joining(invite))
        case .awaitingApproval: JoinStateMachine(state: .awaitingApproval(invite))
        case .joined: JoinStateMachine(state: .joined(groupID: groupID ?? "", existing: existing))
        case .failed:
            JoinStateMachine(state: .joinFailed(.rejected(errorType ?? .genericFailure, reason: reason)))
        case .cancelled: JoinStateMachine(state: .cancelled)
        }
    }

    public var isFinal: Bool { machine.state.isFinal }

    /// The user-facing line for the attempt's outcome so far.
    public var userMessage: String { machine.state.userMessage ?? "" }

    /// Takes the state machine's new state. States the store cannot hold
    /// (validating, uninitialized, a local validation failure) never reach
    /// a persisted attempt.
    mutating func adopt(_ state: JoinStateMachine.State, at date: Date) {
        updatedAt = date
        switch state {
        case .validated: phase = .validated
        case .joining: phase = .joining
        case .awaitingApproval(let invite):
            phase = .awaitingApproval
            self.invite = invite
            groupID = invite.approval?.groupID ?? groupID
        case .joined(let groupID, let existing):
            phase = .joined
            self.groupID = groupID
            self.existing = existing
        case .joinFailed(.rejected(let type, let reason)):
            phase = .failed
            errorType = type
            self.reason = reason
        case .joinFailed(.invalidInvite(let error)):
            phase = .failed
            errorType = .genericFailure
            reason = error.description
        case .cancelled: phase = .cancelled
        case .uninitialized, .validating: break
        }
    }
}

/// A join answer to apply to the attempts it concerns, together with the
/// message that carried it.
public struct JoinEventForStore: Sendable {
    public let tag: String
    public let event: JoinStateMachine.Event
}
