/// A media engine that carries no media: it negotiates like a WebRTC peer
/// connection (offers, answers, ICE restarts with new credentials,
/// candidates) and reports ICE connected once a negotiation completes while
/// its scripted path is open. The CLI takes part in calls' signaling with
/// it; tests script the media path with ``cutPath()`` and
/// ``restorePath()``.
public actor ScriptedMediaEngine: CallMediaEngine {
    public nonisolated let events: AsyncStream<CallMediaEvent>
    private let continuation: AsyncStream<CallMediaEvent>.Continuation
    private let name: String
    /// ICE credentials' generation: each restart makes a new one.
    private var generation = 0
    private var localOffer: String?
    private var negotiated = false
    private var pathOpen = true
    private var state: CallICEState = .new

    public init(name: String = "scripted") {
        self.name = name
        (events, continuation) = AsyncStream.makeStream(bufferingPolicy: .unbounded)
    }

    public func makeOffer(iceRestart: Bool) async throws -> String {
        if iceRestart || localOffer == nil { generation += 1 }
        if iceRestart { negotiated = false }
        let offer = "v=0\r\no=\(name) \(generation) offer\r\na=ice-ufrag:\(name)\(generation)\r\n"
        localOffer = offer
        continuation.yield(.localCandidate(CallCandidate(candidate: "candidate:\(name) \(generation) udp host")))
        return offer
    }

    public func currentOffer() async -> String? { localOffer }

    public func acceptOffer(_ sdp: String) async throws -> String {
        guard sdp.hasPrefix("v=0") else { throw ScriptedMediaError.notAnSDP }
        localOffer = nil
        generation += 1
        continuation.yield(.localCandidate(CallCandidate(candidate: "candidate:\(name) \(generation) udp host")))
        complete()
        return "v=0\r\no=\(name) \(generation) answer\r\na=ice-ufrag:\(name)\(generation)\r\n"
    }

    public func acceptAnswer(_ sdp: String) async throws {
        guard sdp.hasPrefix("v=0") else { throw ScriptedMediaError.notAnSDP }
        guard localOffer != nil else { return }
        complete()
    }

    public func addRemoteCandidate(_ candidate: CallCandidate) async {}

    public func close() async {
        report(.closed)
        continuation.finish()
    }

    /// The media path breaks: ICE reports disconnected.
    public func cutPath() {
        pathOpen = false
        report(.disconnected)
    }

    /// The media path works again: a completed negotiation reconnects.
    public func restorePath() {
        pathOpen = true
        if negotiated { report(.connected) }
    }

    private func complete() {
        negotiated = true
        report(pathOpen ? .connected : .checking)
    }

    private func report(_ new: CallICEState) {
        guard new != state else { return }
        state = new
        continuation.yield(.iceState(new))
    }
}

public enum ScriptedMediaError: Error, Sendable {
    case notAnSDP
}
