/// The connection status every Rally surface shows: one pure machine for
/// the relay connection and for calls (the seed's unified state machine).
/// No failed state: the status is connected, recovering or retrying until
/// the user leaves or the server confirms the session is gone (idle).
public enum ConnectionStatus: String, Sendable, Codable, CaseIterable {
    case idle, connected, recovering, retrying
}

/// What counts as a degraded signal.
public enum ConnectionDegradation: String, Sendable, Codable {
    case transportError = "transport_error"
    case missedPings = "missed_pings"
    case networkChange = "network_change"
}

public enum ConnectionStatusEvent: Sendable, Equatable {
    case degraded(ConnectionDegradation)
    case recovered
    /// The timer the machine asked for fired; the machine checks the time
    /// itself, so an early or late timer is harmless.
    case timerFired
    case userLeft
    case gone
}

public enum ConnectionStatusEffect: Sendable, Equatable {
    /// Fire `timerFired` at this time (replaces any earlier timer).
    case scheduleTimer(atMillis: Int64)
    case cancelTimer
    /// Entering retrying: a short haptic on phones; no sound.
    case haptic
}

/// What a surface shows for a status.
public struct ConnectionStatusPresentation: Sendable, Equatable, Codable {
    public var status: ConnectionStatus
    public var indicatorVisible: Bool
    public var text: String?
    public var subText: String?
    public var showsLeave: Bool

    public init(status: ConnectionStatus, indicatorVisible: Bool, text: String?, subText: String?, showsLeave: Bool) {
        self.status = status
        self.indicatorVisible = indicatorVisible
        self.text = text
        self.subText = subText
        self.showsLeave = showsLeave
    }
}

/// One change of what to show.
public struct ConnectionStatusUpdate: Sendable, Equatable {
    public var presentation: ConnectionStatusPresentation
    /// Play the haptic now (entering retrying).
    public var haptic: Bool

    public init(presentation: ConnectionStatusPresentation, haptic: Bool) {
        self.presentation = presentation
        self.haptic = haptic
    }
}

public struct ConnectionStatusMachine: Sendable, Equatable {
    public static let indicatorDelayMillis: Int64 = 800
    public static let retryingAfterMillis: Int64 = 10_000
    public static let reconnectingText = "Reconnecting…"
    public static let longerThanUsualText = "Taking longer than usual…"
    public static let leaveActionTitle = "Leave"

    public private(set) var status: ConnectionStatus
    public private(set) var recoveringSince: Int64?
    public private(set) var indicatorVisible = false

    public init(status: ConnectionStatus = .idle) {
        self.status = status
        indicatorVisible = status == .retrying
    }

    public mutating func handle(_ event: ConnectionStatusEvent, atMillis now: Int64) -> [ConnectionStatusEffect] {
        switch (status, event) {
        case (.idle, .degraded), (.connected, .degraded):
            status = .recovering
            recoveringSince = now
            indicatorVisible = false
            return [.scheduleTimer(atMillis: now + Self.indicatorDelayMillis)]
        case (.idle, .recovered):
            status = .connected
            return []
        case (.recovering, .recovered), (.retrying, .recovered):
            status = .connected
            recoveringSince = nil
            indicatorVisible = false
            return [.cancelTimer]
        case (.recovering, .timerFired):
            // A machine created recovering has no start yet: its first
            // timer starts the clock (without this, every timer re-armed
            // +800 ms and the machine never escalated).
            let since = recoveringSince ?? now
            recoveringSince = since
            if now - since >= Self.retryingAfterMillis {
                status = .retrying
                indicatorVisible = true
                return [.haptic]
            }
            if now - since >= Self.indicatorDelayMillis {
                indicatorVisible = true
                return [.scheduleTimer(atMillis: since + Self.retryingAfterMillis)]
            }
            return [.scheduleTimer(atMillis: since + Self.indicatorDelayMillis)]
        case (.connected, .userLeft), (.connected, .gone), (.recovering, .userLeft), (.recovering, .gone),
            (.retrying, .userLeft), (.retrying, .gone):
            status = .idle
            recoveringSince = nil
            indicatorVisible = false
            return [.cancelTimer]
        default:
            return []
        }
    }

    public var presentation: ConnectionStatusPresentation {
        ConnectionStatusPresentation(
            status: status, indicatorVisible: indicatorVisible,
            text: indicatorVisible ? Self.reconnectingText : nil,
            subText: status == .retrying ? Self.longerThanUsualText : nil, showsLeave: status == .retrying)
    }
}
