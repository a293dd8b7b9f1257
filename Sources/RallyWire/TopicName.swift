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
        guard raw.utf8.count <= WireLimits.maxTopicLength else { throw .tooLong(raw.utf8.count) }
        let parts = raw.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else { throw .malformed(raw) }
        // Dot segments would be rewritten by URL handling on the HTTP path.
        guard !parts.contains(where: { $0 == "." || $0 == ".." }) else { throw .malformed(raw) }
        for byte in raw.utf8 where !Self.isAllowed(byte) {
            throw .invalidCharacter(raw)
        }
        let kindText = String(parts[0])
        self.rawValue = raw
        self.id = String(parts[1])
        switch kindText {
        case "inbox": self.kind = .inbox
        case "group": self.kind = .group
        default: self.kind = .other(kindText)
        }
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
