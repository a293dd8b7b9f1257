import Crypto
public import Foundation
public import RallyCrypto
public import RallyWire

public struct GroupMember: Sendable, Equatable {
    public let identity: PublicIdentity
    public var role: GroupRole
    public let addedBy: InboxID?

    public var inboxID: InboxID { identity.inboxID }
}

/// A group as every member computes it from the log: a value, changed only
/// by `apply`, identical for all honest members that applied the same log.
public struct GroupState: Sendable, Equatable {
    public let groupID: String
    /// Advances by one with every applied commit.
    public private(set) var epoch: UInt64 = 0
    public private(set) var profile = GroupProfile(name: "", description: "")
    public private(set) var members: [InboxID: GroupMember] = [:]
    /// Set by a leave: the leaver knows the current key, so the next commit
    /// must replace it.
    public private(set) var needsRekey = false
    public private(set) var isCreated = false
    public private(set) var lastCommitID = Data()
    /// Every applied commit id, so a commit seen twice (a republished
    /// retry) is applied once.
    public private(set) var appliedCommitIDs: Set<Data> = []
    /// The group's invite identity, once an admin set invites up.
    public private(set) var inviteIdentity: PublicIdentity?
    /// Only invites issued under this tag admit; rotating it revokes the rest.
    public private(set) var inviteTag = Data()
    /// Tags rotated away: never valid again.
    public private(set) var retiredInviteTags: Set<Data> = []
    /// How often each invite (by invite id) has admitted someone.
    public private(set) var inviteUses: [Data: UInt32] = [:]
    /// Join requests that admitted someone: each admits at most once.
    public private(set) var admittedJoinRequests: Set<Data> = []
    public private(set) var banned: Set<InboxID> = []
    /// Members whose messages every member hides ("blocked by an admin").
    public private(set) var blocked: Set<InboxID> = []
    /// The owner's welcome message, shown to each new member.
    public private(set) var welcomeMessage = ""
    /// An exploded group accepts no further commit.
    public private(set) var exploded = false
    /// A deleted group accepts no further commit, and every member's client
    /// drops it.
    public private(set) var deleted = false
    /// The group's one link, if an admin made it.
    public private(set) var groupLink: GroupLink?
    /// Tags of deleted links: never valid again.
    public private(set) var retiredLinkTags: Set<Data> = []
    /// Whether joiners wait for a moderator's approval.
    public private(set) var admission: GroupAdmission = .auto
    /// Joiners waiting for approval.
    public private(set) var pending: [InboxID: PendingMember] = [:]
    /// People an admin invited, until they accept (or the invitation is
    /// withdrawn or declined).
    public private(set) var invited: [InboxID: InvitedMember] = [:]
    /// The owner's preferences, enforced at each message's position.
    public private(set) var preferences = GroupPreferences()
    /// The hash chain over every applied commit: each commit names the
    /// transcript it builds on, so members shown different histories find
    /// out (ADR 0008).
    public private(set) var transcript: Data
    /// An admin left with the invite seed: invites admit nobody until an
    /// admin sets up a new invite identity.
    public private(set) var invitesNeedRotation = false
    /// Invite identities the group used before its current one.
    public private(set) var retiredInviteIdentities: [PublicIdentity] = []

    public init(groupID: String) {
        self.groupID = groupID
        self.transcript = CommitSealing.initialTranscript(groupID: groupID)
    }

    /// Members sorted by role (highest first), then inbox id: the order
    /// every listing uses.
    public var sortedMembers: [GroupMember] {
        members.values.sorted { ($0.role, $1.inboxID) > ($1.role, $0.inboxID) }
    }

    public func role(of inbox: InboxID) -> GroupRole? { members[inbox]?.role }

    /// Members who hold the invite seed: admins and owners.
    public var admins: Set<InboxID> { Set(members.values.filter { $0.role >= .admin }.map(\.inboxID)) }

    /// Applies one verified commit at its position in the log. Invalid
    /// commits change nothing and say why; every member rejects the same
    /// commits for the same reasons.
    public mutating func apply(_ event: VerifiedGroupCommit) -> GroupOutcome {
        let commit = event.commit
        if appliedCommitIDs.contains(commit.commitID) { return .duplicate }
        switch GroupRules.check(event, against: self) {
        case .failure(let rejection):
            return .rejected(rejection)
        case .success(let change):
            var effects = change.effects
            mutate(with: change, author: event.author)
            epoch += 1
            transcript = CommitSealing.transcript(after: transcript, commitBytes: event.signedBytes)
            lastCommitID = commit.commitID
            appliedCommitIDs.insert(commit.commitID)
            effects.append(
                .epochAdvanced(
                    epoch: epoch, commitID: commit.commitID,
                    freshKey: change.rekeys
                        ? FreshEpochKey(sealed: commit.epochKeys, commitment: commit.epochKeyCommitment) : nil))
            return .applied(effects)
        }
    }

    private mutating func mutate(with change: GroupRules.Change, author: PublicIdentity) {
        mutate(change.mutation, author: author)
        if let rotation = change.inviteRotation { setUpInvites(rotation.identity, tag: rotation.tag) }
        if change.rekeys { needsRekey = false }
        if case .leave(let inbox) = change.mutation {
            needsRekey = !members.isEmpty
            if change.leaverWasAdmin, inviteIdentity != nil, inbox == author.inboxID { invitesNeedRotation = true }
        }
    }

    /// What one mutation changes. The rules run a batch's entries through
    /// it one by one, checking each on the state the ones before it leave.
    mutating func mutate(_ mutation: GroupRules.Mutation, author: PublicIdentity) {
        switch mutation {
        case .admitMany(let mutations):
            for each in mutations { mutate(each, author: author) }
        case .create(let profile):
            isCreated = true
            self.profile = profile
            members[author.inboxID] = GroupMember(identity: author, role: .owner, addedBy: nil)
        case .add(let identity, let role, let admission):
            members[identity.inboxID] = GroupMember(identity: identity, role: role, addedBy: author.inboxID)
            pending[identity.inboxID] = nil
            invited[identity.inboxID] = nil
            if let admission {
                count(admission)
            } else {
                // An admin adding someone by hand lifts a ban.
                banned.remove(identity.inboxID)
            }
        case .addPending(let member, let admission):
            pending[member.inboxID] = member
            if let admission { count(admission) }
        case .admitPending(let inbox, let role):
            if let waiting = pending.removeValue(forKey: inbox) {
                members[inbox] = GroupMember(identity: waiting.identity, role: role, addedBy: author.inboxID)
            }
        case .rejectPending(let inbox):
            pending[inbox] = nil
        case .invite(let invitee):
            invited[invitee.inboxID] = invitee
        case .withdrawInvitation(let inbox):
            invited[inbox] = nil
        case .setPreferences(let changes):
            preferences.merge(changes)
        case .setGroupLink(let link):
            groupLink = link
        case .deleteGroupLink:
            if let groupLink { retiredLinkTags.insert(groupLink.tag) }
            groupLink = nil
        case .setAdmission(let admission):
            self.admission = admission
        case .delete:
            deleted = true
        case .removeMany(let inboxes, let ban, _):
            for inbox in inboxes {
                members[inbox] = nil
                blocked.remove(inbox)
                if ban { banned.insert(inbox) }
            }
        case .setRoles(let inboxes, let role):
            for inbox in inboxes { members[inbox]?.role = role }
        case .block(let inboxes, let isBlocked):
            if isBlocked { blocked.formUnion(inboxes) } else { blocked.subtract(inboxes) }
        case .setWelcome(let text):
            welcomeMessage = text
        case .leave(let inbox):
            members[inbox] = nil
            blocked.remove(inbox)
        case .setProfile(let profile):
            self.profile = profile
        case .rekey:
            break
        case .setUpInvites(let identity, let tag):
            setUpInvites(identity, tag: tag)
        case .rotateInviteTag(let tag):
            retiredInviteTags.insert(inviteTag)
            inviteTag = tag
        case .explode:
            exploded = true
        }
    }

    private mutating func count(_ admission: GroupRules.Admission) {
        inviteUses[admission.inviteID, default: 0] += 1
        admittedJoinRequests.insert(admission.joinRequestID)
    }

    /// A new invite identity retires the old one and its tag: invites
    /// issued before it no longer admit anyone, and the link (whose join
    /// requests the old identity reads) goes too.
    private mutating func setUpInvites(_ identity: PublicIdentity, tag: Data) {
        if let inviteIdentity {
            retiredInviteIdentities.append(inviteIdentity)
            retiredInviteTags.insert(inviteTag)
        }
        if let groupLink {
            retiredLinkTags.insert(groupLink.tag)
            self.groupLink = nil
        }
        inviteIdentity = identity
        inviteTag = tag
        invitesNeedRotation = false
    }

    /// Restores a state from a snapshot (a welcome). The snapshot is trusted
    /// as far as the member who sent it is: the newcomer cannot replay the
    /// history before it.
    public init(snapshot: WireGroupSnapshot) throws(GroupSnapshotError) {
        self.groupID = snapshot.groupID
        self.epoch = snapshot.epoch
        self.profile = GroupProfile(wire: snapshot.profile)
        self.needsRekey = snapshot.needsRekey
        // Every applied commit advances the epoch, so epoch 0 means the
        // create commit has not been applied yet.
        self.isCreated = snapshot.epoch > 0
        self.lastCommitID = snapshot.lastCommitID
        self.appliedCommitIDs = Set(snapshot.appliedCommitIds)
        if snapshot.hasInviteIdentity {
            do {
                inviteIdentity = try PublicIdentity(wire: snapshot.inviteIdentity)
            } catch {
                throw .invalidMember("invite identity: \(error.description)")
            }
        }
        inviteTag = snapshot.inviteTag
        retiredInviteTags = Set(snapshot.retiredInviteTags)
        for use in snapshot.inviteUses { inviteUses[use.inviteID] = use.uses }
        admittedJoinRequests = Set(snapshot.admittedJoinRequests)
        for text in snapshot.banned {
            guard let inbox = try? InboxID(validating: text) else { throw .invalidMember("banned inbox id") }
            banned.insert(inbox)
        }
        exploded = snapshot.exploded
        for text in snapshot.blocked {
            guard let inbox = try? InboxID(validating: text) else { throw .invalidMember("blocked inbox id") }
            blocked.insert(inbox)
        }
        welcomeMessage = snapshot.welcomeMessage
        deleted = snapshot.deleted
        admission = GroupAdmission(wire: snapshot.admission)
        retiredLinkTags = Set(snapshot.retiredLinkTags)
        if snapshot.hasGroupLink {
            let link = snapshot.groupLink
            switch GroupLink.decode(signedInvite: link.signedInvite, role: link.role, admission: link.admission) {
            case .success(let decoded): groupLink = decoded
            case .failure(let rejection): throw .invalidMember("group link: \(rejection)")
            }
        }
        preferences = GroupPreferences(wire: snapshot.preferences)
        for record in snapshot.invited {
            guard let identity = try? PublicIdentity(wire: record.identity), let role = GroupRole(wire: record.role),
                let invitedBy = try? InboxID(validating: record.invitedBy)
            else { throw .invalidMember("invited member") }
            invited[identity.inboxID] = InvitedMember(identity: identity, role: role, invitedBy: invitedBy)
        }
        for record in snapshot.pending {
            guard let identity = try? PublicIdentity(wire: record.identity), let role = GroupRole(wire: record.role),
                let addedBy = try? InboxID(validating: record.addedBy)
            else { throw .invalidMember("pending member") }
            pending[identity.inboxID] = PendingMember(
                identity: identity, role: role, addedBy: addedBy, inviteTag: record.inviteTag,
                joinRequestID: record.joinRequestID)
        }
        guard snapshot.transcript.count == 32 else { throw .invalidMember("transcript") }
        transcript = snapshot.transcript
        invitesNeedRotation = snapshot.invitesNeedRotation
        for bundle in snapshot.retiredInviteIdentities {
            do {
                retiredInviteIdentities.append(try PublicIdentity(wire: bundle))
            } catch {
                throw .invalidMember("retired invite identity: \(error.description)")
            }
        }
        members.reserveCapacity(snapshot.members.count)
        for record in snapshot.members {
            let identity: PublicIdentity
            do {
                identity = try PublicIdentity(wire: record.identity)
            } catch {
                throw .invalidMember(error.description)
            }
            guard let role = GroupRole(wire: record.role) else { throw .invalidMember("unknown role") }
            let addedBy = record.addedBy.isEmpty ? nil : try? InboxID(validating: record.addedBy)
            members[identity.inboxID] = GroupMember(identity: identity, role: role, addedBy: addedBy)
        }
        guard members.values.contains(where: { $0.role == .owner }) || members.isEmpty else {
            throw .invalidMember("no owner")
        }
    }

    public var snapshot: WireGroupSnapshot {
        var snapshot = WireGroupSnapshot()
        snapshot.groupID = groupID
        snapshot.epoch = epoch
        snapshot.profile = profile.wire
        snapshot.needsRekey = needsRekey
        snapshot.lastCommitID = lastCommitID
        snapshot.appliedCommitIds = appliedCommitIDs.sorted { $0.bytesPrecede($1) }
        if let inviteIdentity { snapshot.inviteIdentity = inviteIdentity.wireBundle }
        snapshot.inviteTag = inviteTag
        snapshot.retiredInviteTags = retiredInviteTags.sorted { $0.bytesPrecede($1) }
        snapshot.inviteUses = inviteUses.sorted { $0.key.bytesPrecede($1.key) }.map { id, uses in
            var use = WireInviteUse()
            use.inviteID = id
            use.uses = uses
            return use
        }
        snapshot.admittedJoinRequests = admittedJoinRequests.sorted { $0.bytesPrecede($1) }
        snapshot.banned = banned.map(\.rawValue).sorted()
        snapshot.exploded = exploded
        snapshot.blocked = blocked.map(\.rawValue).sorted()
        snapshot.welcomeMessage = welcomeMessage
        snapshot.deleted = deleted
        snapshot.admission = admission.wire
        snapshot.retiredLinkTags = retiredLinkTags.sorted { $0.bytesPrecede($1) }
        if let groupLink { snapshot.groupLink = groupLink.wire }
        snapshot.pending = pending.values.sorted { $0.inboxID < $1.inboxID }.map(\.wire)
        snapshot.invited = invited.values.sorted { $0.inboxID < $1.inboxID }.map(\.wire)
        snapshot.preferences = preferences.wire
        snapshot.transcript = transcript
        snapshot.invitesNeedRotation = invitesNeedRotation
        snapshot.retiredInviteIdentities = retiredInviteIdentities.map(\.wireBundle)
        snapshot.members = sortedMembers.map { member in
            var record = WireGroupMemberRecord()
            record.identity = member.identity.wireBundle
            record.role = member.role.wire
            record.addedBy = member.addedBy?.rawValue ?? ""
            return record
        }
        return snapshot
    }
}

public struct GroupProfile: Sendable, Equatable, Codable {
    /// The display name.
    public var name: String
    public var description: String
    public var fullName: String
    public var image: GroupImage?

    public init(name: String, description: String, fullName: String = "", image: GroupImage? = nil) {
        self.name = name
        self.description = description
        self.fullName = fullName
        self.image = image
    }

    init(wire: WireGroupProfile) {
        self.init(
            name: wire.name, description: wire.description_p, fullName: wire.fullName,
            image: wire.hasImage ? GroupImage(mediaType: wire.image.mediaType, data: wire.image.data) : nil)
    }

    var wire: WireGroupProfile {
        var profile = WireGroupProfile()
        profile.name = name
        profile.description_p = description
        profile.fullName = fullName
        if let image {
            profile.image.mediaType = image.mediaType
            profile.image.data = image.data
        }
        return profile
    }
}

/// A group's picture. It travels only inside sealed commits and welcomes,
/// so the relay never sees it.
public struct GroupImage: Sendable, Equatable, Codable {
    /// At most this many bytes: it rides in every welcome.
    public static let maxBytes = 64 << 10
    public static let mediaTypes = ["image/png", "image/jpeg", "image/gif", "image/webp"]

    public var mediaType: String
    public var data: Data

    public init(mediaType: String, data: Data) {
        self.mediaType = mediaType
        self.data = data
    }

    /// The image in `data`, its type told by its first bytes; nil when it
    /// is none of the accepted types.
    public init?(sniffing data: Data) {
        let signatures: [(String, [UInt8])] = [
            ("image/png", [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]), ("image/jpeg", [0xFF, 0xD8, 0xFF]),
            ("image/gif", Array("GIF8".utf8)),
        ]
        if let (type, _) = signatures.first(where: { data.starts(with: $0.1) }) {
            self.init(mediaType: type, data: data)
        } else if data.count >= 12, data.prefix(4) == Data("RIFF".utf8),
            data.dropFirst(8).prefix(4) == Data("WEBP".utf8)
        {
            self.init(mediaType: "image/webp", data: data)
        } else {
            return nil
        }
    }

    /// SHA-256 of the bytes, hex: what a link preview shows of it.
    public var digest: String { Hex.encode(SHA256.hash(data: data)) }
}

public enum GroupSnapshotError: Error, Equatable, Sendable {
    case invalidMember(String)
}

/// A fresh epoch key as a commit carries it: sealed to each remaining member.
public struct FreshEpochKey: Sendable, Equatable {
    public let sealed: [WireSealedEpochKey]
    public let commitment: Data
}

public enum GroupEffect: Sendable, Equatable {
    case created
    case memberAdded(InboxID, GroupRole)
    case memberRemoved(InboxID)
    /// Every member's client deletes these members' messages in the group.
    case messagesDeleted([InboxID])
    case blockedForAll([InboxID], Bool)
    case welcomeChanged
    case memberLeft(InboxID)
    case roleChanged(InboxID, GroupRole)
    case profileChanged
    /// Invites were set up; admins open their sealed seed from here.
    case invitesSetUp(sealedSeeds: [WireSealedEpochKey])
    /// A promotion to admin carried the invite seed to the promoted member.
    case inviteSeedShared(WireSealedEpochKey)
    case inviteTagRotated
    case exploded
    /// The owner deleted the group: every member's client drops it.
    case deleted
    case groupLinkChanged
    case admissionChanged(GroupAdmission)
    /// A joiner waits for approval.
    case pendingAdded(InboxID)
    /// A moderator admitted a pending joiner (with `memberAdded`).
    case pendingAdmitted(InboxID)
    /// A moderator turned a pending joiner away.
    case pendingRejected(InboxID)
    case invited(InboxID, GroupRole)
    case preferencesChanged
    /// An invitation was withdrawn, or (`declined`) turned down.
    case invitationWithdrawn(InboxID, declined: Bool)
    /// The epoch moved on; with `freshKey` the key was replaced, otherwise
    /// the next key derives from the previous one.
    case epochAdvanced(epoch: UInt64, commitID: Data, freshKey: FreshEpochKey?)
}

public enum GroupOutcome: Sendable, Equatable {
    case applied([GroupEffect])
    case rejected(GroupRejection)
    /// The commit was applied before (same commit id).
    case duplicate
}

extension Data {
    /// Whether these bytes sort before `other`'s: the order of
    /// `lexicographicallyPrecedes` (byte by byte, a prefix first), compared
    /// with `memcmp`. `lexicographicallyPrecedes` walks `Data`'s iterator a
    /// byte at a time; sorting a long-lived group's commit and request ids
    /// with it was most of what storing a welcome cost (`rally-bench join`).
    func bytesPrecede(_ other: Data) -> Bool {
        withUnsafeBytes { mine in
            other.withUnsafeBytes { theirs in
                let common = Swift.min(mine.count, theirs.count)
                if common > 0 {
                    let order = memcmp(mine.baseAddress!, theirs.baseAddress!, common)
                    if order != 0 { return order < 0 }
                }
                return mine.count < theirs.count
            }
        }
    }
}
