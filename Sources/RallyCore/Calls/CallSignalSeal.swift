import Foundation
public import RallyCrypto

/// What one call participant tells the other through the relay, sealed.
public enum CallSignal: Sendable, Equatable {
    case offer(sdp: String)
    case answer(sdp: String)
    case candidate(CallCandidate)
    /// "Please restart ICE": the answering side asks the offering side.
    case restart
}

/// An ICE candidate as WebRTC's `RTCIceCandidateInit` has it.
public struct CallCandidate: Sendable, Equatable, Codable {
    public var candidate: String
    public var sdpMid: String?
    public var sdpMLineIndex: Int?
    public var usernameFragment: String?

    public init(candidate: String, sdpMid: String? = nil, sdpMLineIndex: Int? = nil, usernameFragment: String? = nil) {
        self.candidate = candidate
        self.sdpMid = sdpMid
        self.sdpMLineIndex = sdpMLineIndex
        self.usernameFragment = usernameFragment
    }
}

/// Why a sealed signal could not be read.
public enum CallSignalError: Error, Sendable, Equatable {
    /// Not sealed under this call's key for this room (or altered).
    case unreadable
    /// Opened, but not a signal this client knows.
    case malformed(String)
}

extension CallSignalSeal {
    public init(link: CallLink) {
        self.init(secret: link.secret, room: link.room)
    }

    public func seal(_ signal: CallSignal) -> String {
        seal(text: CallSignalCodec.encode(signal))
    }

    public func open(_ data: String) throws(CallSignalError) -> CallSignal {
        guard let text = open(text: data) else { throw .unreadable }
        return try CallSignalCodec.decode(text)
    }
}

/// The JSON of a signal: `{"kind": "offer"|"answer"|"candidate"|"restart", …}`.
enum CallSignalCodec {
    private struct JSON: Codable {
        var kind: String
        var sdp: String?
        var candidate: CallCandidate?
    }

    static func encode(_ signal: CallSignal) -> String {
        var json: JSON
        switch signal {
        case .offer(let sdp): json = JSON(kind: "offer", sdp: sdp)
        case .answer(let sdp): json = JSON(kind: "answer", sdp: sdp)
        case .candidate(let candidate): json = JSON(kind: "candidate", candidate: candidate)
        case .restart: json = JSON(kind: "restart")
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        // Strings and optionals always encode.
        return String(decoding: (try? encoder.encode(json)) ?? Data(), as: UTF8.self)
    }

    static func decode(_ text: String) throws(CallSignalError) -> CallSignal {
        let json: JSON
        do {
            json = try JSONDecoder().decode(JSON.self, from: Data(text.utf8))
        } catch {
            throw .malformed("not a signal")
        }
        switch (json.kind, json.sdp, json.candidate) {
        case ("offer", let sdp?, _): return .offer(sdp: sdp)
        case ("answer", let sdp?, _): return .answer(sdp: sdp)
        case ("candidate", _, let candidate?): return .candidate(candidate)
        case ("restart", _, _): return .restart
        default: throw .malformed("a \(json.kind.prefix(16)) signal without its fields")
        }
    }
}
