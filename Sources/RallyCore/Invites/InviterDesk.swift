import Crypto
import Foundation
import RallyCrypto
import RallyWire

/// The contexts of the invite identities (current and retired) of groups
/// this identity administers, by inbox id: each has links of its own to
/// read its join inbox and answer from it.
actor InviteIdentities {
    private var contexts: [String: ClientContext] = [:]

    func context(for keys: InviteKeys, from base: ClientContext) -> ClientContext {
        let inbox = keys.identity.inboxID.rawValue
        if let existing = contexts[inbox] { return existing }
        let made = base.acting(as: keys.identity)
        contexts[inbox] = made
        return made
    }
}

/// The inviter's side of invites: making and revoking signed invites, and
/// answering the join requests that arrive in a group's invite inbox.
struct InviterDesk: Sendable {
    let context: ClientContext
    let log: GroupLog
    let committer: GroupCommitter
    var welcomes: GroupWelcomes
    let identities: InviteIdentities

    // MARK: Invites

    /// Creates a signed invite to a group this identity administers. The
    /// first invite of a group sets invites up: a commit that names the
    /// group's invite identity and seals its seed to every admin.
    func createInvite(
        in reference: String, options: InviteOptions, now: Date
    ) async throws(RallyClientError)
        -> CreatedInvite
    {
        guard !(options.singleUse && options.maxUses > 1) else {
            throw .invite(.invalidOptions("choose --single-use or --max-uses, not both"))
        }
        if let expiresIn = options.expiresIn, expiresIn <= 0 {
            throw .invite(.invalidOptions("the expiry must be in the future"))
        }
        let (record, keys) = try await readyToInvite(reference, granting: options.role)
        let groupID = record.groupID
        let identity = context.identity
        var payload = payload(tag: record.state.inviteTag, record: record, keys: keys)
        payload.requiresApproval = options.admission == .approval
        payload.name = options.name ?? record.state.profile.name
        payload.description_p = options.description ?? ""
        if let expiresIn = options.expiresIn {
            payload.expiresAtMs = ClientClock.millis(now.addingTimeInterval(expiresIn))
        }
        payload.singleUse = options.singleUse || options.maxUses == 1
        payload.maxUses = payload.singleUse ? 1 : options.maxUses
        payload.role = options.role.wire
        payload.createdAtMs = ClientClock.millis(now)
        let signed = Invite.sign(payload, by: identity)
        let slug = InviteSlug.encode(signed)
        let invite = Invite(payload: payload, issuer: identity.publicIdentity, signed: signed)
        let links = InviteLink.links(for: slug, relayURL: context.relayURL)
        return CreatedInvite(invite: invite, slug: slug, appLink: links.app, webLink: links.web, groupID: groupID)
    }

    /// The group, synced, once this admin may grant `role` and invites are
    /// set up, with the invite keys this client holds.
    func readyToInvite(
        _ reference: String, granting role: GroupRole
    ) async throws(RallyClientError) -> (GroupRecord, InviteKeys) {
        let groupID = try log.group(reference).groupID
        try await log.sync(groupID)
        var record = try log.group(groupID)
        let label = "\"\(record.state.profile.name)\""
        guard let myRole = record.state.role(of: context.identity.inboxID), myRole >= .admin else {
            throw .invite(.notAdmin(group: label))
        }
        guard role <= myRole else {
            throw .invite(.invalidOptions("an invite cannot grant \(role), above your role \(myRole)"))
        }
        if record.state.inviteIdentity == nil || record.state.invitesNeedRotation {
            try await setUpInvites(groupID)
            record = try log.group(groupID)
        }
        let keys = try inviteKeys(groupID, label: label)
        // The identity may be new (set up, or rotated when an admin lost
        // their rights): joiners must find its key bundle.
        try await KeyDirectory(context: inviteContext(keys)).publishOwnBundle()
        return (record, keys)
    }

    /// An invite payload by this admin under `tag`, to the group's join
    /// inbox, with the group reference only admins can open.
    func payload(tag: Data, record: GroupRecord, keys: InviteKeys) -> WireInvitePayload {
        let identity = context.identity
        var payload = WireInvitePayload()
        payload.inviteTag = tag
        payload.issuer = identity.publicIdentity.wireBundle
        payload.groupReference = keys.sealReference(groupID: record.groupID, tag: tag, issuer: identity.inboxID)
        payload.joinInboxID = keys.identity.inboxID.rawValue
        return payload
    }

    /// Revokes every outstanding invite of a group by rotating its invite
    /// tag. Requests made with an older invite are answered
    /// `invite_revoked`.
    func revokeInvites(in reference: String) async throws(RallyClientError) {
        let groupID = try log.group(reference).groupID
        let committer = self.committer
        try await committer.commit(groupID) { state throws(RallyClientError) in
            guard state.inviteIdentity != nil else {
                throw .invite(.invitesNotSetUp(group: "\"\(state.profile.name)\""))
            }
            var commit = committer.newCommit(on: state)
            commit.rotateInviteTag.inviteTag = Randomness.bytes(16)
            return commit
        }
    }

    private func setUpInvites(_ groupID: String) async throws(RallyClientError) {
        let keys = try committer.newInviteKeys()
        let seed = keys.seed
        // Published first, so a joiner can always seal a request to it.
        try await KeyDirectory(context: inviteContext(keys)).publishOwnBundle()
        let tag = Randomness.bytes(16)
        let committer = self.committer
        do {
            try await committer.commit(groupID) { state throws(RallyClientError) in
                if state.inviteIdentity != nil, !state.invitesNeedRotation {
                    throw .group(.commitRejected(.invitesAlreadySetUp))
                }
                var commit = committer.newCommit(on: state)
                commit.setUpInvites.inviteIdentity = keys.identity.publicIdentity.wireBundle
                commit.setUpInvites.inviteTag = tag
                commit.setUpInvites.sealedSeeds = try committer.sealInviteSeed(
                    seed, to: state.members.values.filter { $0.role >= .admin }.map(\.identity), state: state)
                return commit
            }
        } catch .group(.commitRejected(.invitesAlreadySetUp)) {
            // Another admin set them up meanwhile; their seed reached us
            // through the log.
        }
    }

    private func inviteKeys(_ groupID: String, label: String) throws(RallyClientError) -> InviteKeys {
        let seed = try context.stored { () throws(LocalStoreError) in try context.store.inviteSeed(group: groupID) }
        guard let seed, let keys = try? InviteKeys(seed: seed) else { throw .invite(.noInviteKeys(group: label)) }
        return keys
    }

    /// The context acting as a group's invite identity: this home and
    /// relay, the invite identity's own links.
    func inviteContext(_ keys: InviteKeys) async -> ClientContext {
        await identities.context(for: keys, from: context)
    }

    // MARK: Blocks

    /// Lifts this client's block on an inbox's join requests to a group.
    func unblockJoinSender(_ inbox: InboxID, in reference: String) throws(RallyClientError) -> Bool {
        let groupID = try log.group(reference).groupID
        return try context.stored { () throws(LocalStoreError) in
            try context.store.unblockJoinSender(inbox, group: groupID)
        }
    }

    /// Who this client blocked from a group's join requests, and why.
    func blockedJoinSenders(in reference: String) throws(RallyClientError) -> [(inbox: String, reason: String)] {
        let groupID = try log.group(reference).groupID
        return try context.stored { () throws(LocalStoreError) in try context.store.blockedJoinSenders(group: groupID) }
    }

    // MARK: Join requests

    /// The invite seeds this client holds, current and retired, by group.
    func inviteSeeds() throws(RallyClientError) -> [(groupID: String, seed: SymmetricKey)] {
        try context.stored { () throws(LocalStoreError) in try context.store.inviteSeeds() }
    }

    /// Reads every invite inbox this client holds keys for, up to its
    /// head, and answers each request.
    func processJoinRequests() async throws(RallyClientError) -> [JoinRequestReport] {
        let collector = ReportCollector()
        for (groupID, seed) in try inviteSeeds() {
            try await followJoinRequests(groupID: groupID, seed: seed, untilCaughtUp: true) { report in
                await collector.add(report)
            }
        }
        return await collector.reports
    }

    /// Follows one group's invite inbox: every request is decided, acted on
    /// and recorded before `handler` sees the report. Requests are read and
    /// answered side by side: those that arrive while a batch is being
    /// answered make the next batch, one commit for all of them.
    func followJoinRequests(
        groupID: String, seed: SymmetricKey, untilCaughtUp: Bool,
        handler: @escaping @Sendable (JoinRequestReport) async -> Void
    ) async throws(RallyClientError) {
        guard let keys = try? InviteKeys(seed: seed) else { return }
        let inviteContext = await inviteContext(keys)
        let answerer = JoinRequestHandler(desk: self, groupID: groupID, keys: keys, inviteContext: inviteContext)
        let queue = JoinRequestQueue()
        let outcome = await withTaskGroup(of: RallyClientError?.self) { group -> RallyClientError? in
            group.addTask {
                var failure: RallyClientError?
                do throws(RallyClientError) {
                    try await inviteContext.followTopic(
                        inviteContext.inboxTopic, untilCaughtUp: untilCaughtUp,
                        process: { envelope throws(RallyClientError) in await queue.add(envelope) },
                        caughtUp: { await queue.markCaughtUp() })
                } catch {
                    failure = error
                }
                await queue.finish()
                return failure
            }
            group.addTask {
                var failure: RallyClientError?
                while !Task.isCancelled {
                    let batch = await queue.take()
                    if batch.isEmpty { break }
                    do throws(RallyClientError) {
                        let reports = try await answerer.handle(batch)
                        for report in reports { await handler(report) }
                    } catch {
                        failure = error
                        break
                    }
                }
                await queue.finish()
                return failure
            }
            for await failure in group {
                if let failure {
                    group.cancelAll()
                    return failure
                }
            }
            return nil
        }
        if let outcome { throw outcome }
    }
}

private actor ReportCollector {
    var reports: [JoinRequestReport] = []
    func add(_ report: JoinRequestReport) { reports.append(report) }
}
