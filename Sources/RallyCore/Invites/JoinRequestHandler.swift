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

    /// One request of a batch, as read from the invite inbox.
    private struct Read {
        let seq: UInt64
        /// Nil when the envelope does not open: no provable sender.
        let asked: JoinRequestPolicy.Asked?
        let problem: String
    }

    /// What was finally done with one request.
    private struct Answer {
        var decision: JoinRequestDecision
        var errorSent = false
    }

    /// Answers a batch of requests, oldest first: every admission among
    /// them goes into one commit (and one round of welcomes), so joiners
    /// who ask at once are admitted at once. The batch's requests are
    /// recorded, with the inbox cursor, in one transaction once every
    /// answer went out.
    func handle(_ envelopes: [WireEnvelope]) async throws(RallyClientError) -> [JoinRequestReport] {
        // Opening a request is CPU-bound (a key agreement and a signature
        // check): a batch is opened on every core.
        let reads = await envelopes.mapOnEveryCore(read)
        var decisions = try decide(reads)
        // An admission reads the log to its head and decides again before
        // it commits; any other answer is final, so it is given on the group
        // as it is now (a revocation or an explosion may have just landed).
        if decisions.contains(where: { $0.map { !$0.isAdmission } ?? false }),
            (try? context.store.group(groupID)) != nil
        {
            do {
                try await desk.log.sync(groupID)
                decisions = try decide(reads)
            } catch {
                context.logger.warning("could not sync group \(groupID) before answering join requests: \(error)")
            }
        }
        var answers: [Int: Answer] = [:]
        var admissions: [(index: Int, asked: JoinRequestPolicy.Asked, admission: JoinRequestDecision.Admission)] = []
        for (index, decision) in decisions.enumerated() {
            guard let decision, let asked = reads[index].asked else { continue }
            if case .admit(let admission) = decision, !admission.committed {
                admissions.append((index, asked, admission))
            } else {
                answers[index] = try await perform(decision, asked: asked)
            }
        }
        for chunk in stride(from: 0, to: admissions.count, by: GroupRules.maxAdmissionBatch) {
            let part = Array(admissions[chunk..<min(chunk + GroupRules.maxAdmissionBatch, admissions.count)])
            let answered = try await admit(part.map { ($0.asked, $0.admission) })
            for (offset, answer) in answered.enumerated() { answers[part[offset].index] = answer }
        }
        // Recorded together, once every answer went out: a crash before
        // that leaves them all to be handled again, which the policy makes
        // safe (a seen request is a duplicate, a cut-off admission is
        // finished).
        var reports: [JoinRequestReport] = []
        var finished: [FinishedJoinRequest] = []
        reports.reserveCapacity(reads.count)
        finished.reserveCapacity(reads.count)
        for (index, read) in reads.enumerated() {
            let (report, record) = recorded(read, answers[index])
            reports.append(report)
            finished.append(record)
        }
        let topic = inviteContext.inboxTopic
        let now = context.clock.now()
        try context.stored { () throws(LocalStoreError) in
            try context.store.finishJoinRequests(finished, groupID: groupID, topic: topic, now: now)
        }
        return reports
    }

    private func read(_ envelope: WireEnvelope) -> Read {
        let verified: VerifiedMessage
        do {
            verified = try MessageSealing.open(envelope.payload, as: keys.identity)
        } catch {
            // No provable sender: nobody to answer or block.
            context.logger.warning("invite inbox of \(groupID): dropped envelope #\(envelope.seq): \(error)")
            return Read(seq: envelope.seq, asked: nil, problem: "\(error)")
        }
        let decoded = context.codecs.decode(verified.body.content)
        let request = decoded.contentType == JoinRequestCodec.contentType ? decoded.value as? WireJoinRequest : nil
        return Read(
            seq: envelope.seq,
            asked: JoinRequestPolicy.Asked(
                requestID: verified.messageID, sender: verified.sender, request: request, keys: keys),
            problem: "")
    }

    /// Decides every request of a batch on the group as stored. A request
    /// seen earlier in the batch is a duplicate, and a sender the batch
    /// blocked is ignored from then on, as if each had been recorded.
    private func decide(_ reads: [Read]) throws(RallyClientError) -> [JoinRequestDecision?] {
        let store = context.store
        let groupID = groupID
        let me = context.identity.inboxID
        let now = context.clock.now()
        let asked = reads.compactMap(\.asked)
        return try context.stored { () throws(LocalStoreError) in
            let group = try store.group(groupID)
            // What the store knows of the whole batch, read at once.
            let known = try store.joinRequestHistory(
                requestIDs: asked.map(\.requestID.hexString), senders: asked.map(\.sender.inboxID), group: groupID)
            var seen: Set<Data> = []
            var blocked = known.blocked
            return reads.map { read in
                guard let asked = read.asked else { return nil }
                let seenBefore =
                    !seen.insert(asked.requestID).inserted || known.seen.contains(asked.requestID.hexString)
                let senderBlocked = blocked.contains(asked.sender.inboxID)
                let decision = asked.decide(
                    groupID: groupID, group: group, me: me, seenBefore: seenBefore, senderBlocked: senderBlocked,
                    now: now)
                if case .block = decision { blocked.insert(asked.sender.inboxID) }
                return decision
            }
        }
    }

    /// What to record of one answered request, and its report.
    private func recorded(_ read: Read, _ answer: Answer?) -> (JoinRequestReport, FinishedJoinRequest) {
        guard let asked = read.asked, let answer else {
            return (
                JoinRequestReport(
                    groupID: groupID, seq: read.seq, requestID: nil, joiner: nil, decision: nil, errorSent: false),
                FinishedJoinRequest(
                    requestID: nil, joiner: nil, outcome: .ignored, detail: read.problem, block: false, seq: read.seq)
            )
        }
        let joiner = asked.sender
        let (outcome, detail) = answer.decision.recorded
        if outcome == .blocked { context.logger.warning("blocked \(joiner.inboxID): \(detail ?? "")") }
        // A duplicate keeps the record of the first handling.
        let requestID: String? = answer.decision == .duplicate ? nil : asked.requestID.hexString
        return (
            JoinRequestReport(
                groupID: groupID, seq: read.seq, requestID: asked.requestID.hexString, joiner: joiner.inboxID,
                decision: answer.decision, errorSent: answer.errorSent),
            FinishedJoinRequest(
                requestID: requestID, joiner: joiner.inboxID, outcome: outcome, detail: detail,
                block: outcome == .blocked, seq: read.seq)
        )
    }

    /// Carries out a decision other than an admission.
    private func perform(
        _ decision: JoinRequestDecision, asked: JoinRequestPolicy.Asked
    ) async throws(RallyClientError) -> Answer {
        let joiner = asked.sender
        switch decision {
        case .duplicate, .ignoredBlockedSender, .block, .notForThisClient:
            return Answer(decision: decision)
        case .reject(let type, let reason):
            return Answer(decision: decision, errorSent: await sendJoinError(type, reason: reason, asked: asked))
        case .alreadyMember(let groupID, let tag):
            do {
                try await desk.welcomes.send(
                    to: joiner, groupID: groupID, admission: nil,
                    invite: .init(tag: tag, keys: asked.keys, requestID: asked.requestID))
            } catch {
                context.logger.warning("could not welcome \(joiner.inboxID) back into \(groupID): \(error)")
            }
            return Answer(decision: decision)
        case .awaitingApproval(let groupID, _):
            return Answer(decision: decision, errorSent: await sendPendingNotice(groupID: groupID, asked: asked))
        case .declineInvitation(let groupID):
            do {
                try await desk.committer.withdrawInvitation(of: asked.sender.inboxID, in: groupID, declined: true)
            } catch .group(.commitRejected(.notInvited)) {
                // Withdrawn meanwhile: nothing left to decline.
            }
            return Answer(decision: decision)
        case .admit(let admission) where admission.committed:
            return await finishAdmission(admission, asked: asked)
        case .admit(let admission):
            return try await admit([(asked, admission)])[0]
        }
    }

    /// Answers an admission this client's own commit made but never
    /// answered: the welcome built on that commit, or the notice that the
    /// joiner waits for approval. Without that commit in the store (or with
    /// the joiner not admitted by it) the request counts as a duplicate.
    private func finishAdmission(
        _ admission: JoinRequestDecision.Admission, asked: JoinRequestPolicy.Asked
    ) async -> Answer {
        let decision = JoinRequestDecision.admit(admission)
        if admission.approval {
            return Answer(decision: decision, errorSent: await sendPendingNotice(groupID: groupID, asked: asked))
        }
        let groupID = groupID
        let joinerKey = asked.sender.wireBundle.signingPublicKey
        let found = try? context.stored { () throws(LocalStoreError) in
            try context.store.ownCommitAdmitting(group: groupID, requestID: admission.requestID)
        }
        guard let found, found.snapshot.members.contains(where: { $0.identity.signingPublicKey == joinerKey })
        else { return Answer(decision: .duplicate) }
        context.logger.info("finishing the admission of \(asked.sender.inboxID) to \(groupID): sending its welcome")
        await welcome([(asked, admission)], admittedBy: found.commitID)
        return Answer(decision: decision)
    }

    /// One round of welcomes for joiners one commit admitted. A failure is
    /// logged: the admission stands either way.
    private func welcome(
        _ admitted: [(asked: JoinRequestPolicy.Asked, admission: JoinRequestDecision.Admission)],
        admittedBy commit: Data?
    ) async {
        do {
            try await desk.welcomes.send(
                to: admitted.map { asked, admission in
                    GroupWelcomes.Newcomer(
                        identity: asked.sender,
                        invite: .init(tag: admission.tag, keys: asked.keys, requestID: asked.requestID))
                }, groupID: groupID, admission: commit)
        } catch {
            context.logger.warning(
                "admitted \(admitted.count) joiners to \(groupID) but could not send their welcomes: \(error)")
        }
    }

    /// Admits a batch in one commit built on the latest state, deciding
    /// each request again on the state the ones before it leave: a use
    /// taken meanwhile, or by an earlier request of the batch, turns that
    /// request into the matching answer. Then one round of welcomes and
    /// approval notices. Returns the answers in the batch's order.
    private func admit(
        _ batch: [(asked: JoinRequestPolicy.Asked, admission: JoinRequestDecision.Admission)]
    ) async throws(RallyClientError) -> [Answer] {
        var overtaken: [Int: JoinRequestDecision] = [:]
        var queued: Set<Int> = []
        let committer = desk.committer
        let groupID = groupID
        let welcomes = desk.welcomes
        let store = context.store
        let me = context.identity.inboxID
        let author = context.identity.publicIdentity
        let now = context.clock.now()
        let committed: Data?
        do {
            committed = try await committer.commit(groupID) { state throws(RallyClientError) in
                // Not an admin any more: every decision below says so.
                let actor = state.role(of: me) ?? .observer
                // The batch on `state`, admitting at most `limit` of its
                // requests; those past it are answered that the group is full.
                func build(admitting limit: Int) -> (running: GroupState, added: WireAddMembers) {
                    overtaken = [:]
                    queued = []
                    var running = state
                    var added = WireAddMembers()
                    for (index, (asked, _)) in batch.enumerated() {
                        let again = asked.decide(
                            groupID: groupID,
                            group: GroupRecord(groupID: groupID, topicID: "", state: running, status: .active),
                            me: me, seenBefore: false, senderBlocked: false, now: now)
                        guard case .admit(let current) = again, !current.committed else {
                            overtaken[index] = again
                            continue
                        }
                        guard added.members.count + added.pending.count < limit else {
                            overtaken[index] = .reject(
                                .groupFull, reason: "the group holds as many members as a welcome can carry")
                            continue
                        }
                        let checked: Result<(GroupRules.Mutation, GroupEffect), GroupRejection>
                        if current.approval && !current.invitation {
                            var pending = WireAddPending()
                            pending.member = asked.sender.wireBundle
                            pending.role = current.role.wire
                            pending.viaInvite = current.wire
                            checked = GroupRules.checkAddPending(
                                pending, actor: actor, author: author, against: running)
                            if case .success = checked {
                                added.pending.append(pending)
                                queued.insert(index)
                            }
                        } else {
                            var member = WireAddMember()
                            member.member = asked.sender.wireBundle
                            member.role = current.role.wire
                            if !current.invitation { member.viaInvite = current.wire }
                            checked = GroupRules.checkAdd(member, actor: actor, author: author, against: running)
                            if case .success = checked { added.members.append(member) }
                        }
                        switch checked {
                        case .success(let (mutation, _)):
                            running.mutate(mutation, author: author)
                        case .failure(let rejection):
                            overtaken[index] = JoinRequestPolicy.answer(
                                to: rejection, groupID: groupID, tag: current.tag, maxUses: current.maxUses)
                        }
                    }
                    return (running, added)
                }
                let whole = build(admitting: batch.count)
                var added = whole.added
                let accepted = added.members.count + added.pending.count
                if accepted > 0,
                    !welcomes.canCarry(
                        added, growingFrom: try? store.snapshotByteCount(groupID), after: { whole.running })
                {
                    // The most of the batch, in its order, whose welcome
                    // still fits: a search, as each try encodes the group.
                    var fits = 0
                    var fails = accepted
                    while fails - fits > 1 {
                        let middle = (fits + fails) / 2
                        if welcomes.canCarry(build(admitting: middle).running) {
                            fits = middle
                        } else {
                            fails = middle
                        }
                    }
                    added = build(admitting: fits).added
                }
                var commit = committer.newCommit(on: state)
                switch (added.members.count, added.pending.count) {
                case (0, 0): return nil
                case (1, 0): commit.addMember = added.members[0]
                case (0, 1): commit.addPending = added.pending[0]
                default: commit.addMembers = added
                }
                return commit
            }
        } catch .group(.commitRejected(let rejection)) {
            // The rules caught what the decisions did not (a race inside
            // one epoch). A batch is answered one request at a time; a
            // single request as the rules say.
            guard batch.count == 1 else {
                var answers: [Answer] = []
                for entry in batch { answers += try await admit([entry]) }
                return answers
            }
            let admission = batch[0].admission
            return [
                try await perform(
                    JoinRequestPolicy.answer(
                        to: rejection, groupID: groupID, tag: admission.tag, maxUses: admission.maxUses),
                    asked: batch[0].asked)
            ]
        }
        // One round of welcomes for everyone the commit admitted.
        await welcome(
            batch.indices.filter { overtaken[$0] == nil && !queued.contains($0) }.map { batch[$0] },
            admittedBy: committed)
        // Then the approval notices, and the answers to requests the group
        // overtook, side by side.
        let overtakenAnswers = overtaken
        let queuedIndices = queued
        return await withTaskGroup(of: (Int, Answer).self) { group in
            for (index, (asked, admission)) in batch.enumerated() {
                let decision = JoinRequestDecision.admit(admission)
                if let other = overtakenAnswers[index] {
                    group.addTask {
                        let answer = try? await perform(other, asked: asked)
                        return (index, answer ?? Answer(decision: other))
                    }
                } else if queuedIndices.contains(index) {
                    group.addTask {
                        let sent = await sendPendingNotice(groupID: groupID, asked: asked)
                        return (index, Answer(decision: decision, errorSent: sent))
                    }
                }
            }
            var answers = batch.map { Answer(decision: .admit($0.admission)) }
            for await (index, answer) in group { answers[index] = answer }
            return answers
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
