import Foundation
public import Observation
public import RallyCore
import RallyCrypto

/// The join screen as a view binds to it: where the join stands, why it
/// failed in the product's words, and the two actions a joiner has —
/// cancel, or start again with a new invite (there is no retry of a
/// refused invite: the inviter must send a new one).
@MainActor
@Observable
public final class JoinFlowViewModel {
    public private(set) var state: JoinStateMachine.State = .uninitialized
    /// The persisted join, once a request went out.
    public private(set) var attempt: JoinAttempt?
    /// A connection problem while sending or waiting; the join itself may
    /// still be under way (`rally join status` would tell).
    public private(set) var connectionProblem: String?

    private let client: RallyClient
    private let timeout: Duration?

    public init(client: RallyClient, timeout: Duration? = nil) {
        self.client = client
        self.timeout = timeout
    }

    /// The error type of a refused join, for views that branch on it.
    public var errorType: JoinErrorType? {
        if case .joinFailed(.rejected(let type, _)) = state { return type }
        return nil
    }

    /// What to tell the user now; nil while nothing is going on.
    public var userMessage: String? { state.userMessage }

    public var isWaiting: Bool {
        switch state {
        case .validating, .validated, .joining, .awaitingApproval: true
        default: false
        }
    }

    public var canCancel: Bool { isWaiting }
    /// After a failure or a cancellation the joiner can paste a new invite.
    public var canRetryWithNewInvite: Bool {
        switch state {
        case .joinFailed, .cancelled: true
        default: false
        }
    }

    /// Validates and sends, then waits for the outcome.
    public func join(_ link: String) async {
        await start(link)
        await waitForOutcome()
    }

    /// Validates the invite and sends the request; returns once the join
    /// is under way (or failed locally).
    public func start(_ link: String) async {
        state = .validating
        connectionProblem = nil
        do {
            let sent = try await client.startJoin(link)
            adopt(sent)
        } catch .invite(.invalidInvite(let error)) {
            var machine = JoinStateMachine(state: .validating)
            machine.apply(.validationFailed(error))
            state = machine.state
        } catch {
            connectionProblem = error.description
            state = .uninitialized
        }
    }

    /// Waits until the join ends or the timeout passes.
    public func waitForOutcome() async {
        guard let attempt, !attempt.isFinal else { return }
        do {
            let final = try await client.waitForJoin(requestID: attempt.requestID, timeout: timeout) { changed in
                await self.adopt(changed)
            }
            adopt(final)
        } catch {
            connectionProblem = error.description
        }
    }

    /// Reads answers that arrived while the view was away.
    public func refresh() async {
        guard let attempt else { return }
        do {
            _ = try await client.syncInbox()
            adopt(try await client.joinAttempt(attempt.requestID))
            connectionProblem = nil
        } catch {
            connectionProblem = error.description
        }
    }

    /// Stops waiting; an answer arriving later is ignored.
    public func cancel() async {
        guard canCancel else { return }
        guard let attempt else {
            state = .cancelled
            return
        }
        do {
            adopt(try await client.cancelJoin(attempt.requestID))
        } catch {
            connectionProblem = error.description
        }
    }

    /// Starts over with a new invite from the inviter: validates and sends
    /// it; `waitForOutcome` then waits as after `start`.
    public func retry(withNewInvite link: String) async {
        guard canRetryWithNewInvite else { return }
        attempt = nil
        state = .uninitialized
        await start(link)
    }

    private func adopt(_ attempt: JoinAttempt) {
        self.attempt = attempt
        state = attempt.machine.state
    }
}
