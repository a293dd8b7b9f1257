import Foundation

/// Which transport the client's links use right now.
public enum ActiveTransport: String, Sendable, Codable {
    case webSocket = "websocket"
    case http
}

/// What ``ConnectionMonitor`` knows about the relay connection, for
/// `rally status` and apps' diagnostics.
public struct ConnectionReport: Sendable, Equatable {
    public var presentation: ConnectionStatusPresentation
    public var transport: ActiveTransport
    /// Followers with a live subscription, and those recovering.
    public var healthyFollowers: Int
    public var recoveringFollowers: Int
    /// Recovery attempts since the client opened, per rung of the ladder.
    public var attempts: [RelayRecoveryRung: Int]
    /// The latest attempts in order, oldest first (at most
    /// ``ConnectionMonitor/attemptHistoryLimit``).
    public var recentAttempts: [RelayRecoveryRung]
    public var totalAttempts: Int { attempts.values.reduce(0, +) }
}

/// The client's one view of its relay connection: it runs the pure
/// ``ConnectionStatusMachine`` over the health its followers report (each
/// live subscription is a party; any party recovering is a degraded
/// signal, all parties live again is a recovery), fires the machine's
/// timers on the status clock and tells every observer what to show.
public actor ConnectionMonitor {
    /// What a party (a follower) reports.
    enum Health: Equatable {
        case starting
        case live
        case recovering(ConnectionDegradation)
    }

    private var machine = ConnectionStatusMachine()
    private let clock: ClientClock
    private var timer: Task<Void, Never>?
    /// Tells a timer that fired from one that was replaced meanwhile.
    private var timerGeneration: UInt64 = 0
    private var parties: [UInt64: Health] = [:]
    private var nextParty: UInt64 = 1
    private var observers: [UInt64: AsyncStream<ConnectionStatusUpdate>.Continuation] = [:]
    private var nextObserver: UInt64 = 1
    private var attempts: [RelayRecoveryRung: Int] = [:]
    private var recentAttempts: [RelayRecoveryRung] = []
    /// How many of the latest attempts a report lists.
    public static let attemptHistoryLimit = 64
    /// Set by ``leave()``: followers stop recovering and end.
    public private(set) var hasLeft = false
    public private(set) var transport: ActiveTransport

    init(clock: ClientClock, startsOn transport: ActiveTransport) {
        self.clock = clock
        self.transport = transport
    }

    /// What to show now.
    public var presentation: ConnectionStatusPresentation { machine.presentation }

    public var report: ConnectionReport {
        ConnectionReport(
            presentation: machine.presentation, transport: transport,
            healthyFollowers: parties.values.filter { $0 == .live }.count,
            recoveringFollowers: parties.values.filter { if case .recovering = $0 { true } else { false } }.count,
            attempts: attempts, recentAttempts: recentAttempts)
    }

    /// Every change of what to show, starting with the current one. The
    /// stream ends when the observer stops iterating.
    public func updates() -> AsyncStream<ConnectionStatusUpdate> {
        let (stream, continuation) = AsyncStream<ConnectionStatusUpdate>.makeStream(bufferingPolicy: .unbounded)
        let id = nextObserver
        nextObserver += 1
        observers[id] = continuation
        continuation.yield(ConnectionStatusUpdate(presentation: machine.presentation, haptic: false))
        continuation.onTermination = { _ in Task { await self.removeObserver(id) } }
        return stream
    }

    private func removeObserver(_ id: UInt64) { observers[id] = nil }

    /// The user gave up ("Leave"): the status becomes idle and followers
    /// stop recovering.
    public func leave() {
        hasLeft = true
        apply(.userLeft)
        changed()
    }

    // MARK: Parties

    func join() -> UInt64 {
        let id = nextParty
        nextParty += 1
        parties[id] = .starting
        return id
    }

    func report(_ party: UInt64, _ health: Health) {
        guard parties[party] != nil, parties[party] != health else { return }
        let wasDegraded = isDegraded
        parties[party] = health
        settle(wasDegraded: wasDegraded, signal: health)
        changed()
    }

    func leave(party: UInt64) {
        let wasDegraded = isDegraded
        parties[party] = nil
        settle(wasDegraded: wasDegraded, signal: nil)
        changed()
    }

    func attempted(_ rung: RelayRecoveryRung) {
        attempts[rung, default: 0] += 1
        recentAttempts.append(rung)
        if recentAttempts.count > Self.attemptHistoryLimit { recentAttempts.removeFirst() }
        changed()
    }

    /// A follower ended for good: the relay refused it for a reason no
    /// retry changes (its access to the topic was taken away). With no
    /// other follower left, the session is gone: the status becomes idle
    /// instead of retrying forever.
    func gone(party: UInt64) {
        parties[party] = nil
        if parties.isEmpty {
            apply(.gone)
        } else {
            settle(wasDegraded: true, signal: nil)
        }
        changed()
    }

    // MARK: Waiting for a change

    private var changeWaiters: [CheckedContinuation<Void, Never>] = []

    private func changed() {
        let waiters = changeWaiters
        changeWaiters.removeAll()
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once `condition` holds of the report: for diagnostics and
    /// tests that wait for the ladder or a transport move.
    func waitUntil(_ condition: @Sendable (ConnectionReport) -> Bool) async {
        while !condition(report) {
            await withCheckedContinuation { changeWaiters.append($0) }
        }
    }

    // MARK: The transport in use

    /// Links opened on the fallback, closed when the client moves back.
    private var fallbackLinks: [any RelayLink] = []
    private var probe: Task<Void, Never>?
    /// Counts moves between transports: a follower whose link ended
    /// because the client moved resubscribes at once, without counting it
    /// as trouble.
    private(set) var transportGeneration: UInt64 = 0

    /// Keeps a link opened on the fallback, to close it when the client
    /// moves back; one opened while the client was moving back is closed
    /// at once (its follower resubscribes on the primary transport).
    func register(fallbackLink: any RelayLink) async {
        guard transport == .http else {
            await fallbackLink.close()
            return
        }
        fallbackLinks.append(fallbackLink)
    }

    /// The ladder reached the fallback and it works: the client moves
    /// there. True for the first follower to get there (it starts the
    /// probe).
    func fellBack() -> Bool {
        guard transport == .webSocket else { return false }
        transport = .http
        transportGeneration += 1
        changed()
        return true
    }

    func probing(_ task: Task<Void, Never>) {
        probe?.cancel()
        probe = task
    }

    /// The primary transport works again: move back, ending every link
    /// opened on the fallback so their followers resubscribe on it.
    func movedBack() async {
        guard transport == .http else { return }
        transport = .webSocket
        transportGeneration += 1
        changed()
        probe?.cancel()
        probe = nil
        let links = fallbackLinks
        fallbackLinks.removeAll()
        for link in links { await link.close() }
    }

    private var isDegraded: Bool {
        parties.values.contains { if case .recovering = $0 { true } else { false } }
    }

    private func settle(wasDegraded: Bool, signal: Health?) {
        guard !hasLeft else { return }
        if case .recovering(let reason)? = signal, !wasDegraded {
            apply(.degraded(reason))
        } else if !isDegraded, parties.values.contains(.live), machine.status != .connected {
            apply(.recovered)
        }
    }

    // MARK: The machine

    private func apply(_ event: ConnectionStatusEvent) {
        let before = machine.presentation
        let effects = machine.handle(event, atMillis: ClientClock.millis(clock.now()))
        var haptic = false
        for effect in effects {
            switch effect {
            case .scheduleTimer(let at): schedule(at: at)
            case .cancelTimer:
                timer?.cancel()
                timer = nil
                timerGeneration += 1
            case .haptic: haptic = true
            }
        }
        let after = machine.presentation
        guard after != before || haptic else { return }
        let update = ConnectionStatusUpdate(presentation: after, haptic: haptic)
        for observer in observers.values { observer.yield(update) }
    }

    private func schedule(at deadline: Int64) {
        timer?.cancel()
        timerGeneration += 1
        let generation = timerGeneration
        let clock = self.clock
        let wait = max(0, deadline - ClientClock.millis(clock.now()))
        timer = Task { [weak self] in
            do {
                try await clock.sleep(.milliseconds(wait))
            } catch {
                return
            }
            await self?.timerFired(generation)
        }
    }

    private func timerFired(_ generation: UInt64) {
        guard generation == timerGeneration else { return }
        timer = nil
        apply(.timerFired)
    }
}

/// Whether the relay answered a probe.
public struct RelayProbe: Sendable {
    public var reachable: Bool
    public var transport: ActiveTransport
    public var error: RelayClientError?
}
