public import RallyWire

/// Member roles, lowest to highest. An actor may act on a target only if
/// the actor's role is at least the target's and at least the role the
/// action needs.
public enum GroupRole: Int, Comparable, Sendable, CaseIterable, Codable, CustomStringConvertible {
    case observer = 1
    case member = 2
    case moderator = 3
    case admin = 4
    case owner = 5

    public static func < (lhs: GroupRole, rhs: GroupRole) -> Bool { lhs.rawValue < rhs.rawValue }

    public var description: String {
        switch self {
        case .observer: "observer"
        case .member: "member"
        case .moderator: "moderator"
        case .admin: "admin"
        case .owner: "owner"
        }
    }

    public init?(name: String) {
        guard let role = Self.allCases.first(where: { $0.description == name.lowercased() }) else { return nil }
        self = role
    }

    /// Unknown values from a newer client are refused rather than guessed:
    /// a role decides permissions.
    public init?(wire: WireGroupRole) {
        switch wire {
        case .observer: self = .observer
        case .member: self = .member
        case .moderator: self = .moderator
        case .admin: self = .admin
        case .owner: self = .owner
        case .unspecified, .UNRECOGNIZED: return nil
        }
    }

    public var wire: WireGroupRole {
        switch self {
        case .observer: .observer
        case .member: .member
        case .moderator: .moderator
        case .admin: .admin
        case .owner: .owner
        }
    }

    /// Observers read but cannot send.
    public var canSend: Bool { self >= .member }
}
