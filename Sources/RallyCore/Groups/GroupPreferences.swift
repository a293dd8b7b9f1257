public import RallyWire

/// One group preference: on or off, for whom, and (timed messages) for how
/// long a message lives.
public struct GroupPreference: Sendable, Equatable {
    public var enabled: Bool
    /// Who may use it: at least this role; nil for any member.
    public var minimumRole: GroupRole?
    /// For timed messages: how long a message lives, in seconds.
    public var ttlSeconds: UInt64

    public init(enabled: Bool, minimumRole: GroupRole? = nil, ttlSeconds: UInt64 = 0) {
        self.enabled = enabled
        self.minimumRole = minimumRole
        self.ttlSeconds = ttlSeconds
    }
}

/// The group's preferences (the seed's section 11), set by the owner and
/// enforced by every member's client at each message's position in the
/// log. Keys this client does not know (from a newer one) are kept, sent
/// on in snapshots, and ignored.
public struct GroupPreferences: Sendable, Equatable {
    public enum Key: String, Sendable, CaseIterable, Codable {
        case timedMessages = "timed_messages"
        case reactions
        case voice
        case files
        case directMessages = "direct_messages"
        case fullDeletion = "full_deletion"
        /// Recent history is shared with new members; off, a newcomer
        /// cannot read anything sent before it joined.
        case history
        case reports
    }

    public static let maxKeys = 64
    public static let maxKeyBytes = 64
    /// The longest a timed message may live: one year.
    public static let maxTTLSeconds: UInt64 = 365 * 86_400

    /// What a group starts with.
    public static let defaults: [Key: GroupPreference] = [
        .timedMessages: GroupPreference(enabled: false, ttlSeconds: 86_400),
        .reactions: GroupPreference(enabled: true), .voice: GroupPreference(enabled: true),
        .files: GroupPreference(enabled: true), .directMessages: GroupPreference(enabled: true),
        .fullDeletion: GroupPreference(enabled: false), .history: GroupPreference(enabled: true),
        .reports: GroupPreference(enabled: true),
    ]

    /// Every key set so far, known or not.
    public private(set) var values: [String: GroupPreference] = [:]

    public init() {}

    public subscript(key: Key) -> GroupPreference { values[key.rawValue] ?? Self.defaults[key]! }

    /// Keys set that this client does not know.
    public var unknownKeys: [String] { values.keys.filter { Key(rawValue: $0) == nil }.sorted() }

    /// Whether a member with `role` may use `key` now.
    public func allows(_ key: Key, role: GroupRole) -> Bool {
        let preference = self[key]
        return preference.enabled && role >= (preference.minimumRole ?? .observer)
    }

    /// How long a message sent now lives; nil when timed messages are off.
    public var messageTTLSeconds: UInt64? {
        let timed = self[.timedMessages]
        return timed.enabled && timed.ttlSeconds > 0 ? timed.ttlSeconds : nil
    }

    /// The preference a message's content type falls under, if any.
    public static func key(forContentType type: WireContentTypeId) -> Key? {
        guard type.authorityID == "rally.dev" else { return nil }
        switch type.typeID {
        case ReactionCodec.contentType.type: return .reactions
        case "voice": return .voice
        case "file", "attachment": return .files
        case "report": return .reports
        default: return nil
        }
    }

    /// Why a change is refused; nil when it holds.
    static func problem(with changes: [WireGroupPreference], merging current: GroupPreferences) -> String? {
        var keys = Set(current.values.keys)
        var seen: Set<String> = []
        for change in changes {
            guard !change.key.isEmpty, change.key.utf8.count <= maxKeyBytes else {
                return "a preference key is 1 to \(maxKeyBytes) bytes"
            }
            guard seen.insert(change.key).inserted else { return "the preference \(change.key) is set twice" }
            guard change.ttlSeconds <= maxTTLSeconds else {
                return "a timed message lives at most \(maxTTLSeconds) seconds"
            }
            if change.key == Key.timedMessages.rawValue, change.enabled, change.ttlSeconds == 0 {
                return "timed messages need a time to live"
            }
            if change.minimumRole != .unspecified, GroupRole(wire: change.minimumRole) == nil {
                return "unknown role for \(change.key)"
            }
            keys.insert(change.key)
        }
        return keys.count > maxKeys ? "a group has at most \(maxKeys) preferences" : nil
    }

    mutating func merge(_ changes: [WireGroupPreference]) {
        for change in changes {
            values[change.key] = GroupPreference(
                enabled: change.enabled, minimumRole: GroupRole(wire: change.minimumRole),
                ttlSeconds: change.ttlSeconds)
        }
    }

    public static func wire(_ key: String, _ preference: GroupPreference) -> WireGroupPreference {
        var wire = WireGroupPreference()
        wire.key = key
        wire.enabled = preference.enabled
        wire.minimumRole = preference.minimumRole?.wire ?? .unspecified
        wire.ttlSeconds = preference.ttlSeconds
        return wire
    }

    var wire: [WireGroupPreference] { values.sorted { $0.key < $1.key }.map { Self.wire($0.key, $0.value) } }

    init(wire: [WireGroupPreference]) { merge(wire) }
}
