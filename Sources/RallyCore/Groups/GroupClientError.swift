import Foundation
import RallyCrypto

public enum GroupClientError: Error, Sendable, Equatable, CustomStringConvertible {
    case unknownGroup(String)
    case ambiguousGroup(String, matches: [String])
    case notActive(String, GroupRecord.Status)
    case commitRejected(GroupRejection)
    case gaveUp(attempts: Int)
    case missingEpochKey(UInt64)
    case mayNotSend(GroupRole)
    case diverged(group: String, reason: String)
    /// Rejected by the rules, as recorded by another process on this home.
    case commitRefused(String)
    case noTopicAccess(String)
    /// Neither a moderator of the group nor the pending joiner of that chat.
    case supportNotAllowed(String)
    /// The group's preferences do not let this member send this content.
    case notAllowedByPreference(GroupPreferences.Key, GroupPreference)
    /// One more member would make the group's welcome larger than an
    /// envelope: the newcomer could never open the group.
    case full(String)

    public var description: String {
        switch self {
        case .unknownGroup(let reference): "no group \"\(reference)\" here: see `rally group list`"
        case .ambiguousGroup(let reference, let matches):
            "\"\(reference)\" matches several groups: \(matches.joined(separator: ", ")); use more of the id"
        case .notActive(let group, let status):
            switch status {
            case .removed: "you were removed from \(group)"
            case .left: "you left \(group)"
            case .deleted: "group_not_found: the owner deleted \(group)"
            case .creating, .active: "group \(group) is not ready yet"
            }
        case .commitRejected(let rejection): "the group refused the change: \(rejection)"
        case .gaveUp(let attempts): "the group kept changing under this change; gave up after \(attempts) attempts"
        case .missingEpochKey(let epoch): "this client has no key for epoch \(epoch) of the group"
        case .mayNotSend(let role): "your role in this group is \(role), which may not send"
        case .diverged(let group, let reason):
            "the relay showed this device a different history of \(group) than the other members see (\(reason)); nothing more is sent into it: check with the other members out of band, then forget the group and have an admin add you again"
        case .commitRefused(let reason): "the group refused the change: \(reason)"
        case .notAllowedByPreference(let key, let preference):
            preference.enabled
                ? "\(key.rawValue) need the role \(preference.minimumRole?.description ?? "member") or above in this group"
                : "\(key.rawValue) are off in this group (the owner's preference)"
        case .supportNotAllowed(let group):
            "the support chat of \(group) is for its moderators and above and the joiner waiting for approval; this identity is neither"
        case .noTopicAccess(let group):
            "this device has no access key for the topic of \(group); ask an admin to add you again"
        case .full(let group):
            "group_full: \(group) holds as many members as a welcome can carry; remove a member (or the group image) to make room"
        }
    }
}

/// What a group sync saw.
public struct GroupSyncReport: Sendable {
    public var events: [GroupLogEvent] = []
    public var messages: [StoredMessage] {
        events.compactMap { if case .message(let message) = $0 { message } else { nil } }
    }
    public var rejections: [(seq: UInt64, reason: GroupEntryRejection)] {
        events.compactMap { if case .rejected(let seq, let reason) = $0 { (seq, reason) } else { nil } }
    }
}
