import Foundation
import RallyCrypto
import RallyWire

/// One call, from joining to going home (the seed's call phases): signaling
/// through the relay's room, media through a ``CallMediaEngine``, the
/// connection-status machine while ``CallPhase/inCall`` and the call ladder
/// whenever the call is not connected, until the user leaves or the relay
/// says the room is gone. There is no failed state in a call: only a join
/// the relay refuses ends in ``CallPhase/error``.
///
/// The status timers (800 ms, 10 s) and the ladder's pauses run on the
/// injected clock, the ladder's jitter comes from `jitter`, so tests drive
/// minutes of outage without waiting.
public actor CallSession {
    public nonisolated let link: CallLink
    private let media: any CallMediaEngine
    private let clock: ClientClock
    private let jitter: @Sendable () -> Double
    private let rungJoinTimeout: Duration
    private let seal: CallSignalSeal

    private var snapshot = CallSnapshot()
    private var machine = ConnectionStatusMachine()
    private var ladder = CallLadder()
    private var channel: (any CallSignalingChannel)?
    private var channelGeneration = 0
    private var participant: String?
    private var token: String?
    private var peer: String?
    private var mediaUp = false
    private var started = false
    private var over = false
    private var statusTimer: Task<Void, Never>?
    private var ladderTask: Task<Void, Never>?
    private var mediaTask: Task<Void, Never>?
    private var observers: [UUID: AsyncStream<CallSnapshot>.Continuation] = [:]

    /// How long a WebSocket attempt waits for the room's answer to its join.
    public static let defaultJoinTimeout: Duration = .seconds(CallSignaling.requestTimeout)

    /// `rungJoinTimeout` (real time, like the transport's heartbeat) bounds
    /// how long a ladder rung's WebSocket attempt waits for the room's
    /// answer to its join before the ladder moves on; the first join waits
    /// ``defaultJoinTimeout``.
    public init(
        link: CallLink, media: any CallMediaEngine, clock: ClientClock = .system, backoff: Backoff = .standard,
        jitter: @escaping @Sendable () -> Double = { Double.random(in: 0...1) },
        rungJoinTimeout: Duration = CallSession.defaultJoinTimeout
    ) {
        self.link = link
        self.media = media
        self.clock = clock
        self.jitter = jitter
        self.rungJoinTimeout = rungJoinTimeout
        seal = CallSignalSeal(link: link)
        ladder = CallLadder(backoff: backoff)
    }

    /// What the call shows now.
    public var current: CallSnapshot { snapshot }

    /// Every change of what the call shows, starting with the current one.
    public func updates() -> AsyncStream<CallSnapshot> {
        let (stream, continuation) = AsyncStream.makeStream(of: CallSnapshot.self, bufferingPolicy: .unbounded)
        let id = UUID()
        observers[id] = continuation
        continuation.yield(snapshot)
        continuation.onTermination = { _ in Task { await self.stopObserving(id) } }
        if over { continuation.finish() }
        return stream
    }

    private func stopObserving(_ id: UUID) {
        observers[id] = nil
    }

    // MARK: The user's actions

    /// Joins the room: `joining`, then `waiting` for the other person or
    /// straight to negotiating, then `inCall` once media connects.
    public func start() async {
        guard !started else { return }
        started = true
        set(phase: .joining)
        let events = media.events
        mediaTask = Task { [weak self] in
            for await event in events {
                await self?.mediaEvent(event)
            }
        }
        do {
            try await openSignaling(.webSocket, joinTimeout: CallSession.defaultJoinTimeout)
        } catch {
            await refused(error)
            return
        }
        if peer != nil {
            await negotiate(iceRestart: false)
        } else if snapshot.phase == .joining {
            set(phase: .waiting)
        }
    }

    /// "Leave call": tells the room, then goes home.
    public func leave() async {
        guard !over else { return }
        if let channel { _ = await channel.send(.leave) }
        await end(.left)
    }

    /// The device's network changed (a new interface, a new address): a
    /// degraded signal while in a call.
    public func networkChanged() async {
        await degraded(.networkChange)
    }

    // MARK: Signaling

    private func openSignaling(
        _ transport: CallSignalingTransport, joinTimeout: Duration? = nil
    ) async throws(CallJoinFailure) {
        channelGeneration += 1
        let generation = channelGeneration
        let old = channel
        channel = nil
        await old?.close()
        let (opened, joined) = try await CallSignaling.open(
            transport, relayURL: link.relayURL, room: link.room, token: token,
            joinTimeout: joinTimeout ?? rungJoinTimeout)
        guard generation == channelGeneration, !over else {
            await opened.close()
            return
        }
        channel = opened
        participant = joined.participant
        snapshot.participant = joined.participant
        token = joined.token
        if let present = joined.peers.first(where: { $0.state != ParticipantStateName.gone }) {
            peer = present.participant
        }
        snapshot.transport = transport
        publish()
        Task { [weak self] in
            for await frame in opened.frames {
                await self?.received(frame)
            }
            await self?.signalingEnded(generation: generation)
        }
        await maybeRecovered()
    }

    private func signalingEnded(generation: Int) async {
        guard generation == channelGeneration, !over else { return }
        channel = nil
        await degraded(.transportError)
    }

    private func received(_ frame: RoomServerFrame) async {
        guard !over else { return }
        switch frame {
        case .peer(let update):
            guard update.state == ParticipantStateName.joined else { return }
            let newcomer = peer != update.participant
            peer = update.participant
            if newcomer, snapshot.phase == .waiting || snapshot.phase == .joining {
                await negotiate(iceRestart: false)
            } else if snapshot.phase == .inCall, !mediaUp {
                // The peer is back: restart ICE now rather than at the
                // ladder's next step.
                await negotiate(iceRestart: true)
            }
        case .signal(let from, let data):
            guard let signal = try? seal.open(data) else { return }
            peer = from
            await handle(signal)
        case .roomGone(let reason):
            await end(CallEnd(rawValue: reason) ?? .ended)
        case .joined, .error, .pong:
            return
        }
    }

    private func handle(_ signal: CallSignal) async {
        do {
            switch signal {
            case .offer(let sdp):
                let answer = try await media.acceptOffer(sdp)
                await send(.answer(sdp: answer))
            case .answer(let sdp):
                try await media.acceptAnswer(sdp)
            case .candidate(let candidate):
                await media.addRemoteCandidate(candidate)
            case .restart:
                if isOfferer { await negotiate(iceRestart: true) }
            }
        } catch {
            // A description the engine refused: the ladder's next ICE
            // restart negotiates afresh.
        }
    }

    /// The side with the smaller participant id makes the offers, so two
    /// restarts never cross; the other asks it for one.
    private var isOfferer: Bool {
        guard let participant, let peer else { return false }
        return participant < peer
    }

    private func negotiate(iceRestart: Bool) async {
        guard peer != nil else { return }
        guard isOfferer else {
            if iceRestart { await send(.restart) }
            return
        }
        guard let offer = try? await media.makeOffer(iceRestart: iceRestart) else { return }
        await send(.offer(sdp: offer))
    }

    private func send(_ signal: CallSignal) async {
        guard let peer, let channel else { return }
        _ = await channel.send(.signal(to: peer, data: seal.seal(signal)))
    }

    // MARK: Media

    private func mediaEvent(_ event: CallMediaEvent) async {
        guard !over else { return }
        switch event {
        case .localCandidate(let candidate):
            await send(.candidate(candidate))
        case .iceState(.connected), .iceState(.completed):
            mediaUp = true
            if snapshot.phase == .joining || snapshot.phase == .waiting {
                enterCall()
            } else {
                await maybeRecovered()
            }
        case .iceState(.disconnected), .iceState(.failed):
            mediaUp = false
            await degraded(.transportError)
        case .iceState:
            return
        }
    }

    // MARK: Status and the ladder

    private func enterCall() {
        // Joining resets the status to connected.
        machine = ConnectionStatusMachine(status: .connected)
        ladder.recovered()
        ladderTask?.cancel()
        ladderTask = nil
        snapshot.pending = nil
        statusTimer?.cancel()
        snapshot.phase = .inCall
        snapshot.status = machine.presentation
        publish()
    }

    private func degraded(_ reason: ConnectionDegradation) async {
        guard !over else { return }
        switch snapshot.phase {
        case .inCall:
            apply(machine.handle(.degraded(reason), atMillis: nowMillis))
            climb()
        case .joining, .waiting:
            // Before the call the status stays out of it; a lost signaling
            // connection is taken back with the ladder's pauses.
            if channel == nil { climb() }
        default:
            return
        }
    }

    private func maybeRecovered() async {
        guard snapshot.phase == .inCall, mediaUp, channel != nil, machine.status != .connected else { return }
        apply(machine.handle(.recovered, atMillis: nowMillis))
        ladder.recovered()
        ladderTask?.cancel()
        ladderTask = nil
        snapshot.pending = nil
        publish()
    }

    private var recovered: Bool {
        snapshot.phase == .inCall ? machine.status == .connected : channel != nil
    }

    private func climb() {
        guard ladderTask == nil, !over else { return }
        let step = ladder.next(unit: jitter())
        // Armed before it is shown: whoever sees the planned step and moves
        // the clock (a test's manual clock) finds the pause counted from
        // before that move, not after it.
        ladderTask = after(step.delay) { session in await session.tryRung(step) }
        snapshot.pending = step
        publish()
    }

    /// Runs `action` once `delay` has passed on the call's clock, counted
    /// from `start` (now, unless the caller read the time already): the
    /// deadline is fixed here, so a clock that moves before the task starts
    /// sleeping does not stretch the wait.
    private func after(
        _ delay: Duration, from start: Date? = nil,
        _ action: @escaping @Sendable (isolated CallSession) async -> Void
    ) -> Task<Void, Never> {
        let clock = clock
        let deadline = (start ?? clock.now()).addingTimeInterval(
            Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18)
        return Task { [weak self] in
            do {
                try await clock.sleepUntil(deadline)
            } catch {
                return
            }
            guard let self else { return }
            await action(self)
        }
    }

    private func tryRung(_ step: CallLadder.Step) async {
        ladderTask = nil
        snapshot.pending = nil
        guard !over, !recovered else {
            publish()
            return
        }
        snapshot.rungs.append(CallRungAttempt(step: step, atMillis: nowMillis))
        publish()
        do throws(CallJoinFailure) {
            switch step.rung {
            case .iceRestart:
                if channel == nil { try await openSignaling(snapshot.transport) }
                await negotiate(iceRestart: true)
            case .offerResend:
                if channel == nil { try await openSignaling(snapshot.transport) }
                if isOfferer, let offer = await media.currentOffer() {
                    await send(.offer(sdp: offer))
                } else {
                    await negotiate(iceRestart: true)
                }
            case .rejoin:
                try await openSignaling(.webSocket)
                await negotiate(iceRestart: true)
            case .transportFallback:
                try await openSignaling(.http)
                await negotiate(iceRestart: true)
            }
        } catch .gone(let reason) {
            await end(reason)
            return
        } catch {
            // Still unreachable: the next rung, after a longer pause.
        }
        if !recovered { climb() }
    }

    private func apply(_ effects: [ConnectionStatusEffect]) {
        for effect in effects {
            switch effect {
            case .cancelTimer:
                statusTimer?.cancel()
                statusTimer = nil
            case .scheduleTimer(let at):
                statusTimer?.cancel()
                // One reading of the clock for both the pause and its start.
                let now = clock.now()
                statusTimer = after(.milliseconds(max(0, at - ClientClock.millis(now))), from: now) { session in
                    session.statusTimerFired()
                }
            case .haptic:
                snapshot.haptics += 1
            }
        }
        snapshot.status = machine.presentation
        publish()
    }

    private func statusTimerFired() {
        guard !over else { return }
        apply(machine.handle(.timerFired, atMillis: nowMillis))
    }

    private var nowMillis: Int64 { ClientClock.millis(clock.now()) }

    // MARK: The end

    private func refused(_ failure: CallJoinFailure) async {
        switch failure {
        case .gone(let reason):
            await end(reason)
        case .refused(let error):
            snapshot.error = error
            set(phase: .error)
            await shutDown()
            for observer in observers.values { observer.finish() }
        }
    }

    private func end(_ reason: CallEnd) async {
        guard !over else { return }
        set(phase: .ending)
        apply(machine.handle(reason == .left ? .userLeft : .gone, atMillis: nowMillis))
        snapshot.end = reason
        await shutDown()
        set(phase: .idle)
        for observer in observers.values { observer.finish() }
    }

    private func shutDown() async {
        over = true
        statusTimer?.cancel()
        ladderTask?.cancel()
        snapshot.pending = nil
        channelGeneration += 1
        let channel = self.channel
        self.channel = nil
        await channel?.close()
        await media.close()
        mediaTask?.cancel()
    }

    private func set(phase: CallPhase) {
        snapshot.phase = phase
        publish()
    }

    private func publish() {
        for observer in observers.values { observer.yield(snapshot) }
    }
}

/// Participant states as the relay names them.
enum ParticipantStateName {
    static let joined = "joined"
    static let suspended = "suspended"
    static let gone = "gone"
}
