import Foundation
import RallyCore
import RallyTestSupport
import Testing

// MARK: The shared vector file

/// `Spec/connection-status.vectors.json`, the language-neutral vectors every
/// implementation of the machine replays (its `format` field describes it).
struct ConnectionStatusVectorFile: Decodable, Sendable {
    var description: String
    var format: String
    var constants: Constants
    var vectors: [ConnectionStatusVector]

    struct Constants: Decodable, Sendable {
        var indicatorDelayMs: Int64
        var retryingAfterMs: Int64
        var reconnectingText: String
        var longerThanUsualText: String

        enum CodingKeys: String, CodingKey {
            case indicatorDelayMs = "indicator_delay_ms"
            case retryingAfterMs = "retrying_after_ms"
            case reconnectingText = "reconnecting_text"
            case longerThanUsualText = "longer_than_usual_text"
        }
    }

    static var url: URL { packageRoot().appendingPathComponent("Spec/connection-status.vectors.json") }

    static func data() throws -> Data { try Data(contentsOf: url) }

    static func load() throws -> ConnectionStatusVectorFile {
        try JSONDecoder().decode(ConnectionStatusVectorFile.self, from: data())
    }
}

struct ConnectionStatusVector: Decodable, Sendable, CustomTestStringConvertible {
    var name: String
    var note: String?
    var initialState: ConnectionStatus?
    var steps: [Step]

    var testDescription: String { name }

    enum CodingKeys: String, CodingKey {
        case name, note, steps
        case initialState = "initial_state"
    }

    struct Step: Decodable, Sendable {
        var atMs: Int64
        var event: EventName
        var reason: ConnectionDegradation?
        var expect: Expectation

        enum CodingKeys: String, CodingKey {
            case atMs = "at_ms"
            case event, reason, expect
        }

        /// The machine's event; nil when a reason comes with an event other
        /// than degraded (a malformed vector).
        var machineEvent: ConnectionStatusEvent? {
            switch (event, reason) {
            case (.degraded, let reason): .degraded(reason ?? .transportError)
            case (_, .some): nil
            case (.recovered, nil): .recovered
            case (.timerFired, nil): .timerFired
            case (.userLeft, nil): .userLeft
            case (.gone, nil): .gone
            }
        }
    }

    /// Unknown names fail decoding.
    enum EventName: String, Decodable, Sendable, CaseIterable {
        case degraded, recovered
        case timerFired = "timer_fired"
        case userLeft = "user_left"
        case gone
    }

    struct Expectation: Decodable, Sendable {
        var status: ConnectionStatus
        var indicatorVisible: Bool
        var text: String?
        var subText: String?
        var showsLeave: Bool
        var effects: [Effect]

        enum CodingKeys: String, CodingKey {
            case status
            case indicatorVisible = "indicator_visible"
            case text
            case subText = "sub_text"
            case showsLeave = "shows_leave"
            case effects
        }

        var presentation: ConnectionStatusPresentation {
            ConnectionStatusPresentation(
                status: status, indicatorVisible: indicatorVisible, text: text, subText: subText,
                showsLeave: showsLeave)
        }
    }

    /// `{"schedule_timer_at_ms": N}`, `"cancel_timer"` or `"haptic"`.
    struct Effect: Decodable, Sendable {
        var effect: ConnectionStatusEffect

        private enum Keys: String, CodingKey {
            case scheduleTimerAtMs = "schedule_timer_at_ms"
        }

        init(from decoder: any Decoder) throws {
            if let name = try? decoder.singleValueContainer().decode(String.self) {
                switch name {
                case "cancel_timer": effect = .cancelTimer
                case "haptic": effect = .haptic
                default:
                    throw DecodingError.dataCorrupted(
                        .init(codingPath: decoder.codingPath, debugDescription: "unknown effect \(name)"))
                }
                return
            }
            let container = try decoder.container(keyedBy: Keys.self)
            effect = .scheduleTimer(atMillis: try container.decode(Int64.self, forKey: .scheduleTimerAtMs))
        }
    }
}

// MARK: Replaying the vectors

@Suite("ConnectionStatusMachine")
struct ConnectionStatusMachineTests {
    @Test("Each vector replays exactly", arguments: try ConnectionStatusVectorFile.load().vectors)
    func replay(_ vector: ConnectionStatusVector) throws {
        var machine = ConnectionStatusMachine(status: vector.initialState ?? .idle)
        for (index, step) in vector.steps.enumerated() {
            let event = try #require(step.machineEvent, "step \(index): a reason on \(step.event)")
            let effects = machine.handle(event, atMillis: step.atMs)
            #expect(machine.status == step.expect.status, "step \(index) at \(step.atMs) ms")
            #expect(machine.presentation == step.expect.presentation, "step \(index) at \(step.atMs) ms")
            #expect(effects == step.expect.effects.map(\.effect), "step \(index) at \(step.atMs) ms")
        }
    }

    @Test("The vector file decodes, is not empty and is well formed")
    func vectorFile() throws {
        let file = try ConnectionStatusVectorFile.load()
        #expect(!file.vectors.isEmpty)
        #expect(!file.description.isEmpty && !file.format.isEmpty)
        #expect(Set(file.vectors.map(\.name)).count == file.vectors.count, "vector names are unique")
        for vector in file.vectors {
            #expect(!vector.steps.isEmpty, "\(vector.name) has no steps")
            #expect(vector.initialState != .recovering, "\(vector.name): recovering needs a degraded event")
            let times = vector.steps.map(\.atMs)
            #expect(times == times.sorted(), "\(vector.name): time runs backwards")
            for step in vector.steps {
                #expect(step.machineEvent != nil, "\(vector.name): a reason on \(step.event)")
            }
        }
        // The constants agree with this implementation's.
        #expect(file.constants.indicatorDelayMs == ConnectionStatusMachine.indicatorDelayMillis)
        #expect(file.constants.retryingAfterMs == ConnectionStatusMachine.retryingAfterMillis)
        #expect(file.constants.reconnectingText == ConnectionStatusMachine.reconnectingText)
        #expect(file.constants.longerThanUsualText == ConnectionStatusMachine.longerThanUsualText)
        // Every event, reason and status appears.
        let steps = file.vectors.flatMap(\.steps)
        #expect(Set(steps.map(\.event)) == Set(ConnectionStatusVector.EventName.allCases))
        #expect(Set(steps.compactMap(\.reason).map(\.rawValue)).count == 3)
        #expect(Set(steps.map(\.expect.status)) == Set(ConnectionStatus.allCases))
    }

    @Test("Keys outside the format fail the check, so a typo cannot silently drop an expectation")
    func vectorKeys() throws {
        let root = try #require(
            try JSONSerialization.jsonObject(with: ConnectionStatusVectorFile.data()) as? [String: Any])
        #expect(Set(root.keys) == ["description", "format", "constants", "vectors"])
        let vectors = try #require(root["vectors"] as? [[String: Any]])
        for vector in vectors {
            #expect(Set(vector.keys).isSubset(of: ["name", "note", "initial_state", "steps"]), "\(vector.keys)")
            for step in try #require(vector["steps"] as? [[String: Any]]) {
                #expect(Set(step.keys).isSubset(of: ["at_ms", "event", "reason", "expect"]), "\(step.keys)")
                let expect = try #require(step["expect"] as? [String: Any])
                #expect(
                    Set(expect.keys) == ["status", "indicator_visible", "text", "sub_text", "shows_leave", "effects"],
                    "\(expect.keys)")
            }
        }
    }

    @Test("Unknown event names, reasons and effects fail decoding")
    func decoderRejectsUnknownNames() {
        func decode(_ step: String) throws {
            let json = #"{"name": "n", "steps": [\#(step)]}"#
            _ = try JSONDecoder().decode(ConnectionStatusVector.self, from: Data(json.utf8))
        }
        let expect =
            #""expect": {"status": "idle", "indicator_visible": false, "text": null, "sub_text": null, "shows_leave": false, "effects": []}"#
        #expect(throws: Never.self) { try decode(#"{"at_ms": 0, "event": "gone", \#(expect)}"#) }
        #expect(throws: DecodingError.self) { try decode(#"{"at_ms": 0, "event": "failed", \#(expect)}"#) }
        #expect(throws: DecodingError.self) {
            try decode(#"{"at_ms": 0, "event": "degraded", "reason": "cosmic_rays", \#(expect)}"#)
        }
        let unknownEffect = expect.replacingOccurrences(of: "[]", with: #"["beep"]"#)
        #expect(throws: DecodingError.self) { try decode(#"{"at_ms": 0, "event": "gone", \#(unknownEffect)}"#) }
        let unknownStatus = expect.replacingOccurrences(of: "idle", with: "failed")
        #expect(throws: DecodingError.self) { try decode(#"{"at_ms": 0, "event": "gone", \#(unknownStatus)}"#) }
    }

    // MARK: Outside the vectors

    @Test("A machine created recovering starts its clock at the first timer and still escalates")
    func initiallyRecovering() {
        var machine = ConnectionStatusMachine(status: .recovering)
        #expect(machine.handle(.timerFired, atMillis: 5_000) == [.scheduleTimer(atMillis: 5_800)])
        #expect(machine.handle(.timerFired, atMillis: 5_800) == [.scheduleTimer(atMillis: 15_000)])
        #expect(machine.presentation.indicatorVisible)
        #expect(machine.handle(.timerFired, atMillis: 15_000) == [.haptic])
        #expect(machine.status == .retrying)
    }
}

// MARK: Randomized sequences

@Suite("ConnectionStatusMachine, randomized")
struct ConnectionStatusMachineRandomTests {
    /// A host that honours the machine's timer effects: it keeps the latest
    /// scheduled time and fires it once the clock passes it. Hosts also
    /// deliver stray timers (early, late, duplicate); the machine must not
    /// care.
    struct Host {
        var machine: ConnectionStatusMachine
        var now: Int64
        var timer: Int64?
        /// When the current continuous trouble (recovering or retrying)
        /// began; nil while connected or idle.
        var troubleSince: Int64?
        var haptics = 0
        var retryingEntries = 0

        init(status: ConnectionStatus, now: Int64) {
            machine = ConnectionStatusMachine(status: status)
            self.now = now
        }

        var isTroubled: Bool { machine.status == .recovering || machine.status == .retrying }

        /// Moves the clock to `time`, firing the host's timer on the way.
        mutating func advance(to time: Int64) {
            while let due = timer, due <= time {
                timer = nil
                now = max(now, due)
                apply(.timerFired)
            }
            now = time
            checkLiveness()
        }

        mutating func apply(_ event: ConnectionStatusEvent) {
            let before = machine.status
            let effects = machine.handle(event, atMillis: now)
            let after = machine.status
            for effect in effects {
                switch effect {
                case .scheduleTimer(let at):
                    #expect(at > now, "a timer in the past: \(at) at \(now)")
                    timer = at
                case .cancelTimer: timer = nil
                case .haptic: haptics += 1
                }
            }
            // Continuous trouble.
            let wasTroubled = before == .recovering || before == .retrying
            if isTroubled, !wasTroubled { troubleSince = now }
            if !isTroubled { troubleSince = nil }
            // Transitions.
            #expect(ConnectionStatus.allCases.contains(after))
            if before == .retrying, after != .retrying {
                switch event {
                case .recovered: #expect(after == .connected)
                case .userLeft, .gone: #expect(after == .idle)
                default: Issue.record("retrying → \(after) on \(event)")
                }
            }
            if after == .idle, before != .idle {
                #expect(event == .userLeft || event == .gone, "→ idle on \(event)")
            }
            if after == .retrying, before != .retrying {
                retryingEntries += 1
                #expect(event == .timerFired)
            }
            let hapticCount = effects.filter { $0 == .haptic }.count
            #expect(hapticCount == ((after == .retrying && before != .retrying) ? 1 : 0), "haptic on \(event)")
            checkSafety()
        }

        /// What may never be shown.
        func checkSafety() {
            let shown = machine.presentation
            if shown.indicatorVisible {
                let since = troubleSince ?? .max
                #expect(isTroubled && now - since >= ConnectionStatusMachine.indicatorDelayMillis)
            }
            if machine.status == .retrying {
                let since = troubleSince ?? .max
                #expect(now - since >= ConnectionStatusMachine.retryingAfterMillis)
                #expect(shown.indicatorVisible)
            }
            #expect(shown.text == (shown.indicatorVisible ? ConnectionStatusMachine.reconnectingText : nil))
            #expect(shown.subText == (machine.status == .retrying ? ConnectionStatusMachine.longerThanUsualText : nil))
            #expect(shown.showsLeave == (machine.status == .retrying))
            #expect(haptics == retryingEntries)
        }

        /// What the honoured timers must have brought about by now.
        func checkLiveness() {
            guard let since = troubleSince else { return }
            if now - since >= ConnectionStatusMachine.indicatorDelayMillis {
                #expect(machine.presentation.indicatorVisible, "hidden \(now - since) ms into trouble")
            }
            if now - since >= ConnectionStatusMachine.retryingAfterMillis {
                #expect(machine.status == .retrying, "\(machine.status) \(now - since) ms into trouble")
            }
        }
    }

    static let reasons: [ConnectionDegradation] = [.transportError, .missedPings, .networkChange]

    static func randomEvent(using random: inout SeededGenerator) -> ConnectionStatusEvent {
        switch Int.random(in: 0..<100, using: &random) {
        case 0..<40: .degraded(reasons.randomElement(using: &random)!)
        case 40..<70: .recovered
        case 70..<90: .timerFired
        case 90..<95: .userLeft
        default: .gone
        }
    }

    /// Mostly short gaps (around the 800 ms edge), some around the 10 s
    /// edge, a few long ones.
    static func randomGap(using random: inout SeededGenerator) -> Int64 {
        switch Int.random(in: 0..<100, using: &random) {
        case 0..<10: 0
        case 10..<60: Int64.random(in: 1...1_000, using: &random)
        case 60..<90: Int64.random(in: 1...4_000, using: &random)
        default: Int64.random(in: 1...30_000, using: &random)
        }
    }

    @Test("Invariants hold over random sequences", arguments: [1, 2, 3, 0xC0FFEE] as [UInt64])
    func invariants(seed: UInt64) {
        var random = SeededGenerator(seed: seed)
        var statesSeen: Set<ConnectionStatus> = []
        var retryingEntries = 0
        for _ in 0..<2_500 {
            var host = Host(
                status: random.chance(50) ? .idle : .connected, now: Int64.random(in: 0...1_000_000, using: &random))
            for _ in 0..<Int.random(in: 1...60, using: &random) {
                host.advance(to: host.now + Self.randomGap(using: &random))
                host.apply(Self.randomEvent(using: &random))
                statesSeen.insert(host.machine.status)
            }
            // Let the outage run its course: the honoured timers escalate it.
            host.advance(to: host.now + ConnectionStatusMachine.retryingAfterMillis)
            retryingEntries += host.retryingEntries
        }
        #expect(statesSeen == Set(ConnectionStatus.allCases))
        #expect(retryingEntries > 100)
    }
}
