public import Foundation

/// The limits of call-room signaling frames (docs/adr/0018).
public enum RoomWireLimits {
    /// A sealed signaling payload, base64url: an SDP with its candidates
    /// fits in a few KiB; 64 KiB leaves room without inviting abuse.
    public static let maxSignalDataBytes = 64 * 1024
    /// A whole JSON frame: the payload plus a little framing.
    public static let maxFrameBytes = maxSignalDataBytes + 1024
    /// Room and participant ids: 128 random bits, 32 lowercase hex digits.
    public static let idLength = 32
    /// Reconnect tokens: 256 random bits, 64 lowercase hex digits.
    public static let tokenLength = 64
    /// Frames one HTTP poll answers with at most.
    public static let maxFramesPerPoll = 64

    static func isHex(_ string: String, length: Int) -> Bool {
        string.utf8.count == length && string.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    public static func isRoomID(_ string: String) -> Bool { isHex(string, length: idLength) }
    public static func isToken(_ string: String) -> Bool { isHex(string, length: tokenLength) }

    static func isBase64URL(_ string: String) -> Bool {
        string.utf8.allSatisfy {
            (48...57).contains($0) || (65...90).contains($0) || (97...122).contains($0) || $0 == 45 || $0 == 95
        }
    }
}

/// What a participant sends the relay about a room, one JSON object per
/// WebSocket text message (or per HTTP request on the fallback transport).
public enum RoomClientFrame: Sendable, Equatable {
    /// Takes a place in the room; with a token, takes one's own place back.
    case join(token: String?)
    /// A sealed payload for another participant (base64url; the relay never
    /// reads it).
    case signal(to: String, data: String)
    case leave
    case end
    /// A sign of life; the relay answers `pong`.
    case ping
}

/// What the relay sends a participant.
public enum RoomServerFrame: Sendable, Equatable {
    public struct Peer: Sendable, Equatable, Codable {
        public var participant: String
        /// `joined`, `suspended` or `gone`.
        public var state: String

        public init(participant: String, state: String) {
            self.participant = participant
            self.state = state
        }
    }

    case joined(participant: String, token: String, peers: [Peer])
    case peer(Peer)
    case signal(from: String, data: String)
    /// The room ended, expired, or the other peer left: stop retrying.
    case roomGone(reason: String)
    case error(code: String, message: String)
    case pong
}

/// A frame that cannot be read, with what was wrong.
public enum RoomFrameError: Error, Sendable, Equatable, CustomStringConvertible {
    case empty
    case tooLarge(size: Int, limit: Int)
    case malformed(String)
    case unknownType(String)
    case missingField(String)
    case invalidField(String)

    public var description: String {
        switch self {
        case .empty: "empty frame"
        case .tooLarge(let size, let limit): "frame of \(size) bytes exceeds the limit of \(limit) bytes"
        case .malformed(let reason): "malformed frame: \(reason)"
        case .unknownType(let type): "unknown frame type \"\(type.prefix(32))\""
        case .missingField(let field): "the frame lacks \"\(field)\""
        case .invalidField(let field): "the frame's \"\(field)\" is not valid"
        }
    }
}

/// The JSON shape of every frame: a type and the fields it uses.
private struct RoomFrameJSON: Codable {
    var type: String
    var token: String?
    var to: String?
    var from: String?
    var data: String?
    var participant: String?
    var state: String?
    var peers: [RoomServerFrame.Peer]?
    var reason: String?
    var code: String?
    var message: String?

    init(type: String) {
        self.type = type
    }
}

/// Encoding and strict decoding of room frames: the size is checked before
/// parsing, every id and token must have its exact form.
public enum RoomFrameCodec {
    private static func parse(_ bytes: Data, limit: Int) throws(RoomFrameError) -> RoomFrameJSON {
        guard !bytes.isEmpty else { throw .empty }
        guard bytes.count <= limit else { throw .tooLarge(size: bytes.count, limit: limit) }
        do {
            return try JSONDecoder().decode(RoomFrameJSON.self, from: bytes)
        } catch {
            throw .malformed(String(describing: error).prefix(200).description)
        }
    }

    private static func require(_ value: String?, _ field: String) throws(RoomFrameError) -> String {
        guard let value else { throw .missingField(field) }
        return value
    }

    private static func id(_ value: String?, _ field: String) throws(RoomFrameError) -> String {
        let value = try require(value, field)
        guard RoomWireLimits.isRoomID(value) else { throw .invalidField(field) }
        return value
    }

    private static func signalData(_ value: String?) throws(RoomFrameError) -> String {
        let value = try require(value, "data")
        guard !value.isEmpty, value.utf8.count <= RoomWireLimits.maxSignalDataBytes,
            RoomWireLimits.isBase64URL(value)
        else { throw .invalidField("data") }
        return value
    }

    public static func decodeClient(_ bytes: Data) throws(RoomFrameError) -> RoomClientFrame {
        let json = try parse(bytes, limit: RoomWireLimits.maxFrameBytes)
        switch json.type {
        case "join":
            if let token = json.token, !RoomWireLimits.isToken(token) { throw .invalidField("token") }
            return .join(token: json.token)
        case "signal": return .signal(to: try id(json.to, "to"), data: try signalData(json.data))
        case "leave": return .leave
        case "end": return .end
        case "ping": return .ping
        default: throw .unknownType(json.type)
        }
    }

    public static func decodeServer(_ bytes: Data) throws(RoomFrameError) -> RoomServerFrame {
        let json = try parse(bytes, limit: RoomWireLimits.maxFrameBytes)
        switch json.type {
        case "joined":
            let token = try require(json.token, "token")
            guard RoomWireLimits.isToken(token) else { throw .invalidField("token") }
            let peers = json.peers ?? []
            guard peers.count <= 16, peers.allSatisfy({ RoomWireLimits.isRoomID($0.participant) }) else {
                throw .invalidField("peers")
            }
            return .joined(participant: try id(json.participant, "participant"), token: token, peers: peers)
        case "peer":
            return .peer(
                .init(participant: try id(json.participant, "participant"), state: try require(json.state, "state")))
        case "signal": return .signal(from: try id(json.from, "from"), data: try signalData(json.data))
        case "room_gone": return .roomGone(reason: try require(json.reason, "reason"))
        case "error": return .error(code: try require(json.code, "code"), message: json.message ?? "")
        case "pong": return .pong
        default: throw .unknownType(json.type)
        }
    }

    private static func encode(_ json: RoomFrameJSON) -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // A struct of strings and arrays of strings always encodes.
        return (try? encoder.encode(json)) ?? Data()
    }

    public static func encode(_ frame: RoomClientFrame) -> Data {
        switch frame {
        case .join(let token):
            var json = RoomFrameJSON(type: "join")
            json.token = token
            return encode(json)
        case .signal(let to, let data):
            var json = RoomFrameJSON(type: "signal")
            json.to = to
            json.data = data
            return encode(json)
        case .leave: return encode(RoomFrameJSON(type: "leave"))
        case .end: return encode(RoomFrameJSON(type: "end"))
        case .ping: return encode(RoomFrameJSON(type: "ping"))
        }
    }

    public static func encode(_ frame: RoomServerFrame) -> Data {
        var json: RoomFrameJSON
        switch frame {
        case .joined(let participant, let token, let peers):
            json = RoomFrameJSON(type: "joined")
            json.participant = participant
            json.token = token
            json.peers = peers
        case .peer(let peer):
            json = RoomFrameJSON(type: "peer")
            json.participant = peer.participant
            json.state = peer.state
        case .signal(let from, let data):
            json = RoomFrameJSON(type: "signal")
            json.from = from
            json.data = data
        case .roomGone(let reason):
            json = RoomFrameJSON(type: "room_gone")
            json.reason = reason
        case .error(let code, let message):
            json = RoomFrameJSON(type: "error")
            json.code = code
            json.message = message
        case .pong:
            json = RoomFrameJSON(type: "pong")
        }
        return encode(json)
    }
}
