/// ICE's connection state, as WebRTC reports it.
public enum CallICEState: String, Sendable, Equatable {
    case new, checking, connected, completed, disconnected, failed, closed
}

/// What a media engine tells the call session.
public enum CallMediaEvent: Sendable, Equatable {
    case localCandidate(CallCandidate)
    case iceState(CallICEState)
}

/// The media below a call: on Apple platforms an app plugs in WebRTC
/// (`RTCPeerConnection` maps one to one onto this); the CLI and the tests
/// use ``ScriptedMediaEngine``. Everything above it (rooms, signaling, the
/// status machine, the ladder) is the same either way.
public protocol CallMediaEngine: Sendable {
    /// Local candidates and ICE state changes, for the session's lifetime.
    var events: AsyncStream<CallMediaEvent> { get }
    /// A new offer (with fresh ICE credentials when `iceRestart`), set as
    /// the local description.
    func makeOffer(iceRestart: Bool) async throws -> String
    /// The local offer in force, if this side made one.
    func currentOffer() async -> String?
    /// Applies the peer's offer and returns the answer, set as the local
    /// description.
    func acceptOffer(_ sdp: String) async throws -> String
    /// Applies the peer's answer to the local offer (ignored when no offer
    /// is pending).
    func acceptAnswer(_ sdp: String) async throws
    func addRemoteCandidate(_ candidate: CallCandidate) async
    func close() async
}
