/// The ladder a follower climbs while its relay link is down.
public typealias RecoveryLadder = EscalationLadder<RelayRecoveryRung>

/// One recovery action of the relay connection, lightest first.
public enum RelayRecoveryRung: String, Sendable, CaseIterable, Codable {
    /// Ask the link the follower had for a sign of life; if it answers,
    /// resubscribe on it from the cursor.
    case ping
    /// Open a new WebSocket (a new TCP connection, the relay's challenge,
    /// authentication) and resubscribe from the cursor.
    case reconnect
    /// Start the session over: drop every link this client holds, publish
    /// the key bundle again (a relay restored from an older store may have
    /// lost it), authenticate on a new WebSocket and resubscribe from the
    /// cursor.
    case reauthenticate
    /// Long-poll over HTTP from the cursor, for networks that pass HTTP but
    /// not WebSockets.
    case httpFallback
}

/// An escalation ladder (the relay connection's, a call's): each failed
/// attempt waits the backoff's pause and tries the next, heavier rung;
/// after the last rung it starts again from the first, with the pause still
/// growing, until one works. Pure: the caller supplies the jitter.
public struct EscalationLadder<Rung: Hashable & Sendable>: Sendable, Equatable {

    /// One step: what to try and how long to wait before trying it.
    public struct Step: Sendable, Equatable {
        public var attempt: Int
        public var rung: Rung
        public var delay: Duration
    }

    public let backoff: Backoff
    public let rungs: [Rung]
    /// Attempts made since the last recovery.
    public private(set) var attempts = 0
    private var nextRung = 0

    /// `rungs`: the ladder, lightest first; `fallback` alone when it is
    /// empty.
    public init(backoff: Backoff, rungs: [Rung], fallback: Rung) {
        self.backoff = backoff
        self.rungs = rungs.isEmpty ? [fallback] : rungs
    }

    /// The next attempt. Attempt n waits a uniformly random pause in
    /// `0 ... min(cap, base · 2^(n-1))`; `unit` is that uniform draw.
    public mutating func next(unit: Double) -> Step {
        attempts += 1
        let rung = rungs[nextRung % rungs.count]
        nextRung += 1
        return Step(attempt: attempts, rung: rung, delay: backoff.delay(attempt: attempts, unit: unit))
    }

    /// `step` cannot be tried (a ping with no open link to ping): the next
    /// rung instead, at the same attempt and after the same pause, so a
    /// useless rung costs no extra wait.
    public mutating func skipping(_ step: Step) -> Step {
        let rung = rungs[nextRung % rungs.count]
        nextRung += 1
        return Step(attempt: step.attempt, rung: rung, delay: step.delay)
    }

    /// A rung worked: the next trouble starts from the bottom again.
    public mutating func recovered() {
        attempts = 0
        nextRung = 0
    }
}

extension EscalationLadder where Rung == RelayRecoveryRung {
    /// `rungs`: without a fallback transport, the client leaves out
    /// ``RelayRecoveryRung/httpFallback``; with HTTP forced, only the rungs
    /// that make sense over HTTP remain.
    public init(backoff: Backoff, rungs: [Rung] = Rung.allCases) {
        self.init(backoff: backoff, rungs: rungs, fallback: .reconnect)
    }

    /// The relay announced it is shutting down: its links are gone, so skip
    /// the ping and reconnect after a jittered pause within `window`.
    public mutating func afterShutdownNotice(window: Duration, unit: Double) -> Step {
        attempts += 1
        let rung: Rung = rungs.contains(.reconnect) ? .reconnect : rungs[0]
        nextRung = (rungs.firstIndex(of: rung) ?? 0) + 1
        return Step(attempt: attempts, rung: rung, delay: window * min(max(unit, 0), 1))
    }
}
