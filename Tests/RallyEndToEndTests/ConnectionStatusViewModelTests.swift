import RallyCore
import RallyViewModels
import Testing

/// Runs the real machine the way the client's monitor does: applies events
/// and turns each change of what to show (or a haptic) into an update.
private struct MachineFeed {
    var machine = ConnectionStatusMachine()
    var updates: [ConnectionStatusUpdate] = []

    init(_ events: [(atMillis: Int64, event: ConnectionStatusEvent)]) {
        updates.append(ConnectionStatusUpdate(presentation: machine.presentation, haptic: false))
        for (atMillis, event) in events {
            let before = machine.presentation
            let haptic = machine.handle(event, atMillis: atMillis).contains(.haptic)
            guard machine.presentation != before || haptic else { continue }
            updates.append(ConnectionStatusUpdate(presentation: machine.presentation, haptic: haptic))
        }
    }
}

private actor LeaveRecorder {
    private(set) var calls = 0
    func left() { calls += 1 }
}

/// What the model should show, written out by hand.
private struct Shown: Equatable, CustomStringConvertible {
    var status: ConnectionStatus
    var indicatorVisible: Bool
    var text: String?
    var subText: String?
    var showsLeave: Bool
    var hapticCount: Int

    static func idle(haptics: Int = 0) -> Shown { Shown(.idle, false, nil, nil, false, haptics) }
    static func connected(haptics: Int = 0) -> Shown { Shown(.connected, false, nil, nil, false, haptics) }
    static func recoveringHidden(haptics: Int = 0) -> Shown { Shown(.recovering, false, nil, nil, false, haptics) }
    static func reconnecting(haptics: Int = 0) -> Shown {
        Shown(.recovering, true, "Reconnecting…", nil, false, haptics)
    }
    static func retrying(haptics: Int) -> Shown {
        Shown(.retrying, true, "Reconnecting…", "Taking longer than usual…", true, haptics)
    }

    init(
        _ status: ConnectionStatus, _ indicatorVisible: Bool, _ text: String?, _ subText: String?,
        _ showsLeave: Bool, _ hapticCount: Int
    ) {
        self.status = status
        self.indicatorVisible = indicatorVisible
        self.text = text
        self.subText = subText
        self.showsLeave = showsLeave
        self.hapticCount = hapticCount
    }

    @MainActor init(_ model: ConnectionStatusViewModel) {
        self.init(
            model.status, model.indicatorVisible, model.text, model.subText, model.showsLeave, model.hapticCount)
    }

    var description: String {
        "\(status) visible=\(indicatorVisible) \(text ?? "-") / \(subText ?? "-") leave=\(showsLeave) haptics=\(hapticCount)"
    }
}

@Suite("ConnectionStatusViewModel", .timeLimit(.minutes(10)))
@MainActor
struct ConnectionStatusViewModelTests {
    /// A model that has applied exactly `updates`: the stream is finished
    /// after them, so `start()` returning means all were applied.
    private func makeModel(
        after updates: some Sequence<ConnectionStatusUpdate>, leave: (@Sendable () async -> Void)? = nil
    ) async -> ConnectionStatusViewModel {
        let (stream, continuation) = AsyncStream<ConnectionStatusUpdate>.makeStream()
        for update in updates { continuation.yield(update) }
        continuation.finish()
        let model = ConnectionStatusViewModel(updates: stream, leave: leave)
        await model.start()
        return model
    }

    /// Feeds every prefix of the machine's updates to a fresh model and
    /// checks what it shows after each one.
    private func expectShown(
        _ feed: MachineFeed, _ expected: [Shown], sourceLocation: SourceLocation = #_sourceLocation
    )
        async
    {
        #expect(feed.updates.count == expected.count, sourceLocation: sourceLocation)
        for (count, shown) in zip(1..., expected) {
            let model = await makeModel(after: feed.updates.prefix(count))
            #expect(Shown(model) == shown, "after update \(count)", sourceLocation: sourceLocation)
        }
    }

    @Test("Before any update the model shows nothing")
    func initial() {
        let (stream, _) = AsyncStream<ConnectionStatusUpdate>.makeStream()
        let model = ConnectionStatusViewModel(updates: stream)
        #expect(Shown(model) == .idle())
    }

    @Test("A brief outage: hidden, then Reconnecting… after 800 ms, then nothing")
    func briefOutage() async {
        let feed = MachineFeed([
            (0, .recovered), (1_000, .degraded(.networkChange)), (1_500, .degraded(.missedPings)),
            (1_800, .timerFired), (4_000, .recovered),
        ])
        await expectShown(feed, [.idle(), .connected(), .recoveringHidden(), .reconnecting(), .connected()])
    }

    @Test("A blip under 800 ms never shows the indicator")
    func blip() async {
        let feed = MachineFeed([(0, .recovered), (100, .degraded(.transportError)), (700, .recovered)])
        await expectShown(feed, [.idle(), .connected(), .recoveringHidden(), .connected()])
    }

    @Test("Two long outages: sub-text, Leave and one haptic each")
    func longOutages() async {
        let feed = MachineFeed([
            (0, .recovered),
            (0, .degraded(.transportError)), (800, .timerFired), (10_000, .timerFired),
            (20_000, .degraded(.missedPings)), (30_000, .timerFired), (40_000, .recovered),
            (50_000, .degraded(.networkChange)), (50_800, .timerFired), (60_000, .timerFired),
            (70_000, .gone),
        ])
        await expectShown(
            feed,
            [
                .idle(), .connected(),
                .recoveringHidden(), .reconnecting(), .retrying(haptics: 1), .connected(haptics: 1),
                .recoveringHidden(haptics: 1), .reconnecting(haptics: 1), .retrying(haptics: 2), .idle(haptics: 2),
            ])
    }

    @Test("Leave calls the action; the idle status comes back through the stream")
    func leave() async {
        let recorder = LeaveRecorder()
        let feed = MachineFeed([
            (0, .recovered), (0, .degraded(.transportError)), (800, .timerFired), (10_000, .timerFired),
        ])
        let model = await makeModel(after: feed.updates, leave: { await recorder.left() })
        #expect(Shown(model) == .retrying(haptics: 1))
        await model.leave()
        #expect(await recorder.calls == 1)
        #expect(model.status == .retrying, "the model waits for the machine's update")
        await model.leave()
        #expect(await recorder.calls == 2)
    }

    @Test("Leave without an action does nothing")
    func leaveWithoutAction() async {
        let model = await makeModel(after: MachineFeed([(0, .recovered)]).updates)
        await model.leave()
        #expect(Shown(model) == .connected())
    }

    @Test("start() returns when its task is cancelled, keeping what it showed")
    func cancellation() async {
        let (stream, continuation) = AsyncStream<ConnectionStatusUpdate>.makeStream()
        for update in MachineFeed([(0, .recovered), (0, .degraded(.missedPings))]).updates {
            continuation.yield(update)
        }
        let model = ConnectionStatusViewModel(updates: stream)
        let task = Task { await model.start() }
        task.cancel()
        await task.value
        // The stream is still open: only cancellation ended start().
        continuation.yield(ConnectionStatusUpdate(presentation: ConnectionStatusMachine().presentation, haptic: true))
        #expect(model.hapticCount == 0)
    }

    @Test("A second start() returns at once instead of competing for the stream")
    func secondStart() async {
        let model = await makeModel(after: MachineFeed([(0, .recovered)]).updates)
        await model.start()
        #expect(Shown(model) == .connected())
    }
}
