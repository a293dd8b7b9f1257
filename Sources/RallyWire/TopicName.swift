/// A relay topic name: `<kind>/<id>`, e.g. `inbox/<inboxId>` or
/// `group/<64 hex digits>`. Names are lowercase ASCII so one topic can never
/// be spelled two ways.
public struct TopicName: Hashable, Sendable, CustomStringConvertible {
    public enum Kind: Hashable, Sendable {
        /// A private mailbox: anyone may post, only its owner may read.
        case inbox
        /// A group log, addressed by a random id only members know.
        case group
        /// Any other kind a feature defines (join requests, call rooms, …):
        /// readable and writable by whoever knows the name.
        case other(String)
    }

    public let rawValue: String
    public let kind: Kind
    /// The part after the slash.
    public let id: String

    public var description: String { rawValue }

    public init(validating raw: String) throws(TopicNameError) {
        guard !raw.isEmpty else { throw .empty }
        let bytes = raw.utf8
        guard bytes.count <= WireLimits.maxTopicLength else { throw .tooLong(bytes.count) }
        // Every valid name is made of allowed bytes, all ASCII: one pass
        // over them finds the slash. (Splitting the String walks grapheme
        // clusters, which the relay paid on every publish.) A name with any
        // other byte is refused by the rules on its characters, as before,
        // so its error stays the same.
        var slashes = 0
        var slash = bytes.startIndex
        for index in bytes.indices {
            let byte = bytes[index]
            guard Self.isAllowed(byte) else { throw Self.refusal(ofDisallowed: raw) }
            if byte == UInt8(ascii: "/") {
                if slashes == 0 { slash = index }
                slashes += 1
            }
        }
        let kindText = raw[..<slash]
        let id = slashes == 1 ? raw[raw.utf8.index(after: slash)...] : ""
        guard slashes == 1, !kindText.isEmpty, !id.isEmpty else { throw .malformed(raw) }
        // Dot segments would be rewritten by URL handling on the HTTP path.
        guard kindText != ".", kindText != "..", id != ".", id != ".." else { throw .malformed(raw) }
        self.rawValue = raw
        self.id = String(id)
        switch kindText {
        case "inbox": self.kind = .inbox
        case "group": self.kind = .group
        default: self.kind = .other(String(kindText))
        }
    }

    /// Why a name with a byte that is not allowed is refused, by the rules
    /// on `String`'s own characters: a structure they call malformed first,
    /// else the character.
    private static func refusal(ofDisallowed raw: String) -> TopicNameError {
        let parts = raw.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty,
            // Dot segments would be rewritten by URL handling on the HTTP path.
            !parts.contains(where: { $0 == "." || $0 == ".." })
        else { return .malformed(raw) }
        return .invalidCharacter(raw)
    }

    public static func inbox(_ inboxID: String) throws(TopicNameError) -> TopicName {
        try TopicName(validating: "inbox/" + inboxID)
    }

    public static func group(_ topicID: String) throws(TopicNameError) -> TopicName {
        try TopicName(validating: "group/" + topicID)
    }

    private static func isAllowed(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "/"), UInt8(ascii: "."):
            return true
        default:
            return false
        }
    }
}

public enum TopicNameError: Error, Equatable, Sendable, CustomStringConvertible {
    case empty
    case tooLong(Int)
    case malformed(String)
    case invalidCharacter(String)

    public var description: String {
        switch self {
        case .empty: "topic name is empty"
        case .tooLong(let count): "topic name is \(count) bytes; the limit is \(WireLimits.maxTopicLength)"
        case .malformed(let raw): "topic name \"\(raw)\" is not of the form kind/id"
        case .invalidCharacter(let raw): "topic name \"\(raw)\" has a character outside a-z 0-9 - _ ."
        }
    }
}
