public import Foundation
import RallyCrypto
import RallyWire

/// A call's link: `https://<relay>/call/<room>#<secret>`. The room id
/// names the room on the relay; the secret after `#` (32 bytes, base64url)
/// never reaches the relay and keys the sealed signaling
/// (docs/adr/0018). Whoever holds the link is invited.
public struct CallLink: Sendable, Equatable, CustomStringConvertible {
    public static let maxLength = 2048
    public static let secretBytes = 32

    /// The relay's base URL (scheme, host, port and any path before
    /// `/call/`).
    public let relayURL: URL
    public let room: String
    public let secret: Data

    public init(relayURL: URL, room: String, secret: Data) {
        self.relayURL = relayURL
        self.room = room
        self.secret = secret
    }

    /// Reads a link, refusing anything that is not exactly one.
    public init(parsing text: String) throws(CallLinkError) {
        let text = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard text.utf8.count <= Self.maxLength else { throw .tooLong(limit: Self.maxLength) }
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(),
            scheme == "http" || scheme == "https", components.host?.isEmpty == false
        else { throw .notALink }
        let path = components.percentEncodedPath
        guard let range = path.range(of: "/call/", options: .backwards) else { throw .notACallLink }
        let room = String(path[range.upperBound...])
        guard RoomWireLimits.isRoomID(room) else { throw .badRoom }
        guard let fragment = components.percentEncodedFragment, !fragment.isEmpty else { throw .missingKey }
        guard let secret = Data(base64URLEncoded: fragment), secret.count == Self.secretBytes else { throw .badKey }
        var base = components
        base.percentEncodedPath = String(path[..<range.lowerBound])
        base.fragment = nil
        base.query = nil
        guard let relayURL = base.url else { throw .notALink }
        self.init(relayURL: relayURL, room: room, secret: secret)
    }

    /// A new room's link with a fresh secret.
    public static func fresh(relayURL: URL, room: String) -> CallLink {
        var generator = SystemRandomNumberGenerator()
        let secret = Data((0..<secretBytes).map { _ in UInt8.random(in: 0...255, using: &generator) })
        return CallLink(relayURL: relayURL, room: room, secret: secret)
    }

    public var url: URL {
        let base =
            relayURL.absoluteString.hasSuffix("/")
            ? String(relayURL.absoluteString.dropLast()) : relayURL.absoluteString
        // A base URL and two base64url / hex parts always form a URL.
        return URL(string: "\(base)/call/\(room)#\(secret.base64URLEncoded())")!
    }

    public var description: String { url.absoluteString }
}

/// Why a text is not a call link.
public enum CallLinkError: Error, Sendable, Equatable, CustomStringConvertible {
    case tooLong(limit: Int)
    case notALink
    case notACallLink
    case badRoom
    case missingKey
    case badKey

    public var description: String {
        switch self {
        case .tooLong(let limit): "this is longer than any call link (\(limit) characters at most)"
        case .notALink: "this is not a link: a call link looks like https://relay.example/call/<room>#<key>"
        case .notACallLink: "this link is not a call link: its path has no /call/<room>"
        case .badRoom: "the call link's room id is damaged: it is 32 lowercase hex digits"
        case .missingKey:
            "the call link is incomplete: its key (the part after #) is missing; ask for the whole link"
        case .badKey: "the call link's key (the part after #) is damaged: it is 32 bytes in base64url"
        }
    }
}
