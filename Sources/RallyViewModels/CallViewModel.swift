public import Observation
public import RallyCore

/// A call screen as a view binds to it: the seed's call phase, the
/// connection badge while in the call ("Reconnecting…" after 800 ms,
/// "Taking longer than usual…" with "Leave call" after 10 s), and, once the
/// call is over, whether to go home and what to tell the user there. The
/// model mirrors the ``CallSession``'s snapshots: the timers, the ladder
/// and the relay's `room_gone` live there.
@MainActor
@Observable
public final class CallViewModel {
    public private(set) var phase: CallPhase = .idle
    public private(set) var status: ConnectionStatus = .idle
    /// The badge: shown only while in the call and after 800 ms of trouble.
    public private(set) var indicatorVisible = false
    public private(set) var text: String?
    public private(set) var subText: String?
    /// The "Leave call" link next to the badge (retrying only).
    public private(set) var showsLeave = false
    /// Counts the haptics the machine asked for (entering retrying).
    public private(set) var hapticCount = 0
    /// The call is over: the view returns to the home screen.
    public private(set) var goesHome = false
    /// What the home screen says about how the call ended ("The other
    /// person left the call.", …), or why it could not start.
    public private(set) var homeMessage: String?
    /// Why joining failed (room not found, full, unreachable), if it did.
    public private(set) var error: CallError?
    /// The call's link, to share.
    public nonisolated let link: CallLink

    @ObservationIgnored private let session: CallSession
    @ObservationIgnored private var started = false

    public init(session: CallSession) {
        self.session = session
        self.link = session.link
    }

    /// Joins the call and mirrors it until it is over or the calling task
    /// is cancelled (a view's `.task { await model.start() }`).
    public func start() async {
        guard !started else { return }
        started = true
        let updates = await session.updates()
        let session = session
        Task { await session.start() }
        for await snapshot in updates {
            apply(snapshot)
        }
    }

    /// "Leave call" (the badge's link, or the hang-up button).
    public func leave() async {
        await session.leave()
    }

    /// The device's network changed: the call degrades and recovers by
    /// itself.
    public func networkChanged() async {
        await session.networkChanged()
    }

    private func apply(_ snapshot: CallSnapshot) {
        phase = snapshot.phase
        let shown = snapshot.status
        status = shown.status
        indicatorVisible = shown.indicatorVisible
        text = shown.text
        subText = shown.subText
        showsLeave = shown.showsLeave
        hapticCount = snapshot.haptics
        error = snapshot.error
        goesHome = snapshot.isOver
        homeMessage = snapshot.outcome
    }
}
