/// Where a call stands (the seed's `CallPhase`). The connection-status
/// machine runs only while ``inCall``; joining and waiting have their own
/// handling (the ladder rejoins, the status is not shown).
public enum CallPhase: String, Sendable, Codable, CaseIterable {
    case idle, creatingRoom, joining, waiting, inCall, ending, error
}

/// One action of the call ladder, lightest first: the seed's "ICE restart →
/// offer resend → rejoin → transport fallback → repeat".
public enum CallRecoveryRung: String, Sendable, CaseIterable, Codable {
    /// (Signaling reconnected with the reconnect token if it dropped, then)
    /// an ICE restart: a new offer with fresh ICE credentials, or, from the
    /// answering side, a request for one.
    case iceRestart = "ice_restart"
    /// The current offer sent again (or the request for one): it, or its
    /// answer, may have been lost while the peer was away.
    case offerResend = "offer_resend"
    /// A new signaling connection over WebSocket with the reconnect token
    /// (even if the old one looks alive: it may be half-open), then an ICE
    /// restart.
    case rejoin
    /// Signaling over HTTP requests and long polls, for networks that let
    /// HTTP through but not WebSockets, then an ICE restart.
    case transportFallback = "transport_fallback"
}

/// The call ladder: the relay connection's ladder with the call's rungs and
/// the same backoff (200 ms doubling to 30 s, full jitter).
public typealias CallLadder = EscalationLadder<CallRecoveryRung>

extension EscalationLadder where Rung == CallRecoveryRung {
    public init(backoff: Backoff = .standard) {
        self.init(backoff: backoff, rungs: Rung.allCases, fallback: .rejoin)
    }
}

/// Why a call could not go on.
public enum CallError: Error, Sendable, Equatable, CustomStringConvertible {
    case roomNotFound
    case roomFull
    case unreachable(String)
    case refused(code: String, message: String)
    case media(String)
    case badLink(CallLinkError)
    /// Only the home that created a room keeps its end token.
    case notCreatedHere(String)

    public var description: String {
        switch self {
        case .roomNotFound: "This call does not exist. Check the link, or start a new call."
        case .roomFull: "This call already has two people in it."
        case .unreachable(let reason):
            "The relay could not be reached (\(reason)). Check your connection and try again."
        case .refused(let code, let message): "The relay refused: \(message) (\(code))."
        case .media(let reason): "Camera and microphone are needed for a call (\(reason))."
        case .badLink(let error): error.description
        case .notCreatedHere(let room):
            "This home did not create call \(room), so it cannot end it. Leave the call instead, or end it from the home that created it."
        }
    }
}

/// Why a call ended, as the home screen says it.
public enum CallEnd: String, Sendable, Codable {
    /// The user left ("Leave call").
    case left
    /// The relay says the room is gone: someone ended it…
    case ended
    /// …it expired…
    case expired
    /// …or the other person left a two-person call.
    case peerLeft = "peer_left"

    public var message: String {
        switch self {
        case .left: "You left the call."
        case .ended: "The call has ended."
        case .expired: "The call expired."
        case .peerLeft: "The other person left the call."
        }
    }
}

/// One step of the call ladder as it was tried, and when (on the call's
/// clock, in milliseconds since 1970).
public struct CallRungAttempt: Sendable, Equatable {
    public var step: CallLadder.Step
    public var atMillis: Int64
}

/// What a call screen shows: the phase, the connection status (only
/// meaningful in a call), why it ended or failed, and the ladder's steps
/// (for diagnostics and tests).
public struct CallSnapshot: Sendable, Equatable {
    public var phase: CallPhase = .idle
    public var status: ConnectionStatusPresentation = ConnectionStatusMachine(status: .idle).presentation
    public var end: CallEnd?
    public var error: CallError?
    /// This participant's id in the room (kept across rejoins with the
    /// reconnect token).
    public var participant: String?
    /// The ladder's steps tried since the call started.
    public var rungs: [CallRungAttempt] = []
    /// The ladder's next step, waiting for its pause.
    public var pending: CallLadder.Step?
    /// The signaling transport in use.
    public var transport: CallSignalingTransport = .webSocket
    /// Haptics the status machine asked for so far (entering retrying).
    public var haptics = 0

    public init() {}

    /// The call is over: it ended (back to `idle` with a reason) or the
    /// join was refused (`error`). A screen goes home.
    public var isOver: Bool { phase == .error || (phase == .idle && end != nil) }

    /// What home says about it: why the join failed, or how the call ended.
    public var outcome: String? { isOver ? (error?.description ?? end?.message) : nil }
}
