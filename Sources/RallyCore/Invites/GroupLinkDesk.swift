import Crypto
import Foundation
import RallyCrypto
import RallyWire

/// The group's one link (the seed's section 10), kept in the group state
/// so every admin sees, changes and deletes the same link. Reached as
/// ``RallyClient/groupLinks``.
public struct GroupLinks: Sendable {
    let desk: InviterDesk

    /// Creates the link (admin). A group has one: a second is
    /// `duplicate_group_link` (``GroupRejection/duplicateGroupLink``).
    public func create(
        in reference: String, role: GroupRole = .member, admission: GroupAdmission = .auto
    ) async throws(RallyClientError) -> GroupLink {
        try await desk.createGroupLink(in: reference, role: role, admission: admission, now: desk.context.clock.now())
    }

    /// The link, after reading the log; none is `group_link_not_found`.
    public func show(in reference: String) async throws(RallyClientError) -> GroupLink {
        try await desk.log.sync(desk.log.group(reference).groupID)
        return try desk.groupLink(in: reference)
    }

    /// Changes the role or admission new joiners get; the link stays.
    public func change(
        in reference: String, role: GroupRole? = nil, admission: GroupAdmission? = nil
    ) async throws(RallyClientError) -> GroupLink {
        try await desk.changeGroupLink(in: reference, role: role, admission: admission)
    }

    /// Deletes the link: every admin's client refuses it from then on.
    public func delete(in reference: String) async throws(RallyClientError) {
        try await desk.deleteGroupLink(in: reference)
    }

    /// The web and app links of a link, for this client's relay.
    public func links(for link: GroupLink) -> (app: String, web: String) {
        InviteLink.links(for: link.slug, relayURL: desk.context.relayURL)
    }
}

extension InviterDesk {
    /// Creates the group's one link (admin): an invite under a tag of its
    /// own, whose preview carries the group's name, description and the
    /// SHA-256 of its image. A second is `duplicate_group_link`.
    func createGroupLink(
        in reference: String, role: GroupRole, admission: GroupAdmission, now: Date
    ) async throws(RallyClientError) -> GroupLink {
        let (record, keys) = try await readyToInvite(reference, granting: role)
        guard record.state.groupLink == nil else { throw .group(.commitRejected(.duplicateGroupLink)) }
        var payload = payload(tag: Randomness.bytes(GroupRules.inviteTagByteCount), record: record, keys: keys)
        let profile = record.state.profile
        payload.name = profile.name
        payload.description_p = profile.description
        if let image = profile.image { payload.imageSha256 = Data(SHA256.hash(data: image.data)) }
        payload.role = role.wire
        payload.requiresApproval = admission == .approval
        payload.createdAtMs = ClientClock.millis(now)
        let signed = Invite.sign(payload, by: context.identity)
        try await setGroupLink(record.groupID) { state throws(RallyClientError) in
            guard state.groupLink == nil else { throw .group(.commitRejected(.duplicateGroupLink)) }
            return (signed, role, admission)
        }
        return try groupLink(in: record.groupID)
    }

    /// Changes the role (or admission) new joiners get through the link;
    /// the link itself stays the same.
    func changeGroupLink(
        in reference: String, role: GroupRole?, admission: GroupAdmission?
    ) async throws(RallyClientError) -> GroupLink {
        let groupID = try log.group(reference).groupID
        try await log.sync(groupID)
        try await setGroupLink(groupID) { state throws(RallyClientError) in
            guard let link = state.groupLink else { throw .group(.commitRejected(.groupLinkNotFound)) }
            return (link.invite.signed, role ?? link.role, admission ?? link.admission)
        }
        return try groupLink(in: groupID)
    }

    private func setGroupLink(
        _ groupID: String,
        _ draft: (GroupState) throws(RallyClientError) -> (WireSignedInvite, GroupRole, GroupAdmission)
    ) async throws(RallyClientError) {
        let committer = self.committer
        try await committer.commit(groupID) { state throws(RallyClientError) in
            let (signed, role, admission) = try draft(state)
            var commit = committer.newCommit(on: state)
            commit.setGroupLink.signedInvite = FrameCodec.encode(signed)
            commit.setGroupLink.role = role.wire
            commit.setGroupLink.admission = admission.wire
            return commit
        }
    }

    /// Deletes the link: its tag is retired in the group state, so every
    /// admin's client refuses it from that commit on.
    func deleteGroupLink(in reference: String) async throws(RallyClientError) {
        let groupID = try log.group(reference).groupID
        let committer = self.committer
        try await committer.commit(groupID) { state throws(RallyClientError) in
            guard state.groupLink != nil else { throw .group(.commitRejected(.groupLinkNotFound)) }
            var commit = committer.newCommit(on: state)
            commit.deleteGroupLink = WireDeleteGroupLink()
            return commit
        }
    }

    /// The group's link as the state has it; none is `group_link_not_found`.
    func groupLink(in reference: String) throws(RallyClientError) -> GroupLink {
        guard let link = try log.group(reference).state.groupLink else {
            throw .group(.commitRejected(.groupLinkNotFound))
        }
        return link
    }
}
