import Crypto
import Foundation
import RallyCrypto
import RallyWire

/// Answers the requests of one group's invite inbox: opens each, lets
/// ``JoinRequestPolicy`` decide, carries the decision out (an admission is
/// a commit, then a welcome; a refusal a typed join error sent from the
/// invite identity) and records it with the inbox cursor.
struct JoinRequestHandler: Sendable {
    let desk: InviterDesk
    let groupID: String
    let keys: InviteKeys
    /// The invite identity's context: join errors go out from it.
    let inviteContext: ClientContext

    private var context: ClientContext { desk.context }

    func handle(_ envelope: WireEnvelope) async throws(RallyClientError) -> JoinRequestReport {
        let topic = inviteContext.inboxTopic
        let verified: VerifiedMessage
        do {
            verified = try MessageSealing.open(envelope.payload, as: keys.identity)
        } catch {
            // No provable sender: nobody to answer or block.
            context.logger.warning("invite inbox of \(groupID): dropped envelope #\(envelope.seq): \(error)")
            try finish(nil, nil, .ignored, "\(error)", block: false, topic, envelope.seq)
            return JoinRequestReport(
                groupID: groupID, seq: envelope.seq, requestID: nil, joiner: nil, decision: nil, errorSent: false)
        }
        let requestID = verified.messageID
        let joiner = verified.sender
        let decoded = context.codecs.decode(verified.body.content)
        let request = decoded.contentType == JoinRequestCodec.contentType ? decoded.value as? WireJoinRequest : nil
        let asked = JoinRequestPolicy.Asked(requestID: requestID, sender: joiner, request: request, keys: keys)
        var decision = try decide(asked)
        // An admission reads the log to its head and decides again before
        // it commits; any other answer is final, so it is given on the group
        // as it is now (a revocation or an explosion may have just landed).
        if !decision.isAdmission, (try? context.store.group(groupID)) != nil {
            do {
                try await desk.log.sync(groupID)
                decision = try decide(asked)
            } catch {
                context.logger.warning("could not sync group \(groupID) before answering a join request: \(error)")
            }
        }
        let (final, errorSent) = try await perform(decision, asked: asked)
        let (outcome, detail) = final.recorded
        if outcome == .blocked { context.logger.warning("blocked \(joiner.inboxID): \(detail ?? "")") }
        // A duplicate keeps the record of the first handling.
        let record: String? = final == .duplicate ? nil : requestID.hexString
        try finish(record, joiner.inboxID, outcome, detail, block: outcome == .blocked, topic, envelope.seq)
        return JoinRequestReport(
            groupID: groupID, seq: envelope.seq, requestID: requestID.hexString, joiner: joiner.inboxID,
            decision: final, errorSent: errorSent)
    }

    private func decide(_ asked: JoinRequestPolicy.Asked) throws(RallyClientError) -> JoinRequestDecision {
        let store = context.store
        let groupID = groupID
        let me = context.identity.inboxID
        let now = context.clock.now()
        return try context.stored { () throws(LocalStoreError) in
            asked.decide(
                groupID: groupID, group: try store.group(groupID), me: me,
                seenBefore: try store.joinRequestSeen(asked.requestID.hexString),
                senderBlocked: try store.isBlocked(asked.sender.inboxID, group: groupID), now: now)
        }
    }

    private func finish(
        _ requestID: String?, _ joiner: InboxID?, _ outcome: JoinRequestOutcome, _ detail: String?, block: Bool,
        _ topic: TopicName, _ seq: UInt64
    ) throws(RallyClientError) {
        let now = context.clock.now()
        try context.stored { () throws(LocalStoreError) in
            try context.store.finishJoinRequest(
                requestID: requestID, groupID: groupID, joiner: joiner, outcome: outcome, detail: detail,
                block: block, topic: topic, seq: seq, now: now)
        }
    }

    /// Carries out a decision. An admission is committed on the latest
    /// state, deciding again on every rebuild, so a use taken meanwhile
    /// turns it into the matching error. Returns what was finally done.
    private func perform(
        _ decision: JoinRequestDecision, asked: JoinRequestPolicy.Asked
    ) async throws(RallyClientError) -> (JoinRequestDecision, Bool) {
        let joiner = asked.sender
        switch decision {
        case .duplicate, .ignoredBlockedSender, .block, .notForThisClient:
            return (decision, false)
        case .reject(let type, let reason):
            return (decision, await sendJoinError(type, reason: reason, asked: asked))
        case .alreadyMember(let groupID, let tag):
            do {
                try await desk.welcomes.send(
                    to: joiner, groupID: groupID, admission: nil,
                    invite: .init(tag: tag, keys: asked.keys, requestID: asked.requestID))
            } catch {
                context.logger.warning("could not welcome \(joiner.inboxID) back into \(groupID): \(error)")
            }
            return (decision, false)
        case .awaitingApproval(let groupID, _):
            return (decision, await sendPendingNotice(groupID: groupID, asked: asked))
        case .declineInvitation(let groupID):
            do {
                try await desk.committer.withdrawInvitation(of: asked.sender.inboxID, in: groupID, declined: true)
            } catch .group(.commitRejected(.notInvited)) {
                // Withdrawn meanwhile: nothing left to decline.
            }
            return (decision, false)
        case .admit(let admission):
            var overtaken: JoinRequestDecision = .duplicate
            var queued = false
            let committed: Data?
            let committer = desk.committer
            let groupID = groupID
            let me = context.identity.inboxID
            let now = context.clock.now()
            do {
                committed = try await committer.commit(groupID) { state throws(RallyClientError) in
                    let again = asked.decide(
                        groupID: groupID,
                        group: GroupRecord(groupID: groupID, topicID: "", state: state, status: .active),
                        me: me, seenBefore: false, senderBlocked: false, now: now)
                    guard case .admit(let current) = again else {
                        overtaken = again
                        return nil
                    }
                    var commit = committer.newCommit(on: state)
                    queued = current.approval
                    if current.invitation {
                        commit.addMember.member = joiner.wireBundle
                        commit.addMember.role = current.role.wire
                    } else if current.approval {
                        commit.addPending.member = joiner.wireBundle
                        commit.addPending.role = current.role.wire
                        commit.addPending.viaInvite = current.wire
                    } else {
                        commit.addMember.member = joiner.wireBundle
                        commit.addMember.role = current.role.wire
                        commit.addMember.viaInvite = current.wire
                    }
                    return commit
                }
            } catch .group(.commitRejected(let rejection)) {
                // The rules caught what the decision did not (a race inside
                // one epoch): answer as the rules say.
                return try await perform(
                    JoinRequestPolicy.answer(
                        to: rejection, groupID: groupID, tag: admission.tag, maxUses: admission.maxUses), asked: asked)
            }
            // The group changed under the admission: answer as it is now.
            guard let committed else { return try await perform(overtaken, asked: asked) }
            if queued { return (decision, await sendPendingNotice(groupID: groupID, asked: asked)) }
            do {
                try await desk.welcomes.send(
                    to: joiner, groupID: groupID, admission: committed,
                    invite: .init(tag: admission.tag, keys: asked.keys, requestID: asked.requestID))
            } catch {
                context.logger.warning(
                    "admitted \(joiner.inboxID) to \(groupID) but could not send the welcome: \(error)")
            }
            return (decision, false)
        }
    }

    /// Tells a joiner it waits for approval, from the invite identity (which
    /// its join trusts), naming the moderators and above who may answer.
    /// The message id derives from the request id: one notice, however
    /// many admins answer.
    private func sendPendingNotice(groupID: String, asked: JoinRequestPolicy.Asked) async -> Bool {
        guard let request = asked.request,
            let payload = try? FrameCodec.decode(
                WireInvitePayload.self, from: request.invite.payload, limit: InviteSlug.maxInflatedBytes),
            let record = try? context.store.group(groupID)
        else { return false }
        var notice = WireJoinPendingNotice()
        notice.inviteTag = payload.inviteTag.hexString
        notice.groupID = groupID
        notice.joinRequestID = request.requestID
        notice.approvers = Array(
            record.state.sortedMembers.filter { $0.role >= .moderator }.map(\.inboxID.rawValue)
                .prefix(JoinPendingNoticeCodec.maxApprovers))
        let joiner = asked.sender.inboxID
        do {
            _ = try await DirectMessageService(context: inviteContext).send(
                notice, codec: JoinPendingNoticeCodec(), to: joiner,
                messageID: JoinPendingNoticeCodec.messageID(forRequest: request.requestID), keepCopy: false)
            return true
        } catch {
            context.logger.error("could not tell \(joiner) it waits for approval in \(groupID): \(error)")
            return false
        }
    }

    /// Sends a typed join error from the invite identity. Its message id is
    /// derived from the request id, so however many admins answer the same
    /// request, the joiner's inbox holds one error. A failure is logged and
    /// blocks nothing.
    private func sendJoinError(_ type: JoinErrorType, reason: String, asked: JoinRequestPolicy.Asked) async -> Bool {
        // The decision verified this invite; only its tag is needed here.
        guard let request = asked.request,
            let payload = try? FrameCodec.decode(
                WireInvitePayload.self, from: request.invite.payload, limit: InviteSlug.maxInflatedBytes)
        else { return false }
        let error = InviteJoinError(
            errorType: type, inviteTag: payload.inviteTag.hexString, timestamp: context.clock.now(), reason: reason)
        let joiner = asked.sender.inboxID
        do {
            _ = try await DirectMessageService(context: inviteContext).send(
                error, codec: InviteJoinErrorCodec(), to: joiner,
                messageID: InviteJoinError.messageID(forRequest: request.requestID), keepCopy: false)
            return true
        } catch {
            context.logger.error("could not send the join error \(type.rawValue) to \(joiner): \(error)")
            return false
        }
    }
}
