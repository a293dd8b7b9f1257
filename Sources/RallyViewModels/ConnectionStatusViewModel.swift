public import Observation
public import RallyCore

/// The connection badge as a view binds to it: what the connection-status
/// machine says to show ("Reconnecting…", then "Taking longer than usual…"
/// with a Leave link), and a haptic counter. The model only mirrors the
/// updates it is given — the thresholds and timers live in the machine, so
/// every surface shows the same thing at the same moment.
@MainActor
@Observable
public final class ConnectionStatusViewModel {
    public private(set) var status: ConnectionStatus = .idle
    public private(set) var indicatorVisible = false
    public private(set) var text: String?
    public private(set) var subText: String?
    public private(set) var showsLeave = false
    /// Counts the updates that asked for the haptic (entering retrying). A
    /// counter rather than a flag so a view can play it on every change,
    /// including a second outage after a recovery.
    public private(set) var hapticCount = 0

    @ObservationIgnored private let updates: AsyncStream<ConnectionStatusUpdate>
    @ObservationIgnored private let leaveAction: (@Sendable () async -> Void)?
    /// An `AsyncStream` has one consumer; a second `start()` returns at once.
    @ObservationIgnored private var started = false

    /// - Parameters:
    ///   - updates: what to show, the current status first (as
    ///     ``RallyClient/connectionStatusUpdates()`` delivers it).
    ///   - leave: what the Leave link does; the resulting idle status
    ///     arrives through `updates` like any other change.
    public init(
        updates: AsyncStream<ConnectionStatusUpdate>, leave: (@Sendable () async -> Void)? = nil
    ) {
        self.updates = updates
        self.leaveAction = leave
    }

    /// The client's relay connection, with Leave giving it up.
    public convenience init(client: RallyClient) async {
        let updates = await client.connectionStatusUpdates()
        self.init(updates: updates, leave: { await client.leaveConnection() })
    }

    /// Applies updates until the stream ends or the calling task is
    /// cancelled (a view's `.task { await model.start() }` does both).
    public func start() async {
        guard !started else { return }
        started = true
        for await update in updates {
            apply(update)
        }
    }

    /// The user tapped Leave.
    public func leave() async {
        await leaveAction?()
    }

    private func apply(_ update: ConnectionStatusUpdate) {
        let shown = update.presentation
        status = shown.status
        indicatorVisible = shown.indicatorVisible
        text = shown.text
        subText = shown.subText
        showsLeave = shown.showsLeave
        if update.haptic { hapticCount += 1 }
    }
}
