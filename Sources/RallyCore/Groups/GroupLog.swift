import Crypto
import Foundation
import RallyCrypto
import RallyWire

/// Outcomes of this identity's own commits, by commit id, as this process
/// read them (a live follower may read a commit before the sync that
/// published it does). Taken out when the publisher checks.
actor OwnCommitOutcomes {
    private var outcomes: [Data: GroupOutcome] = [:]

    func record(_ outcome: GroupOutcome, for commitID: Data) { outcomes[commitID] = outcome }
    func take(_ commitID: Data) -> GroupOutcome? { outcomes.removeValue(forKey: commitID) }
}

/// A group's log as this member reads it: the local records of its groups,
/// and reading (sync or follow) each group's topic, applying every entry
/// through ``GroupLogProcessor`` and persisting it with its cursor before
/// anyone sees it.
struct GroupLog: Sendable {
    let context: ClientContext
    let ownOutcomes: OwnCommitOutcomes

    // MARK: Records

    func groups() throws(RallyClientError) -> [GroupRecord] {
        try context.stored { () throws(LocalStoreError) in try context.store.groups() }
    }

    /// The ids of the groups this member is in, without decoding their
    /// states (the watch loop asks after every message).
    func activeGroupIDs() throws(RallyClientError) -> [String] {
        try context.stored { () throws(LocalStoreError) in try context.store.groupIDs(status: .active) }
    }

    /// Resolves a group by id, id prefix or name.
    func group(_ reference: String) throws(RallyClientError) -> GroupRecord {
        let matches = try context.stored { () throws(LocalStoreError) in try context.store.findGroup(reference) }
        guard let first = matches.first else { throw .group(.unknownGroup(reference)) }
        guard matches.count == 1 else { throw .group(.ambiguousGroup(reference, matches: matches.map(\.groupID))) }
        return first
    }

    /// The group, if this member may still send into it.
    func activeGroup(_ groupID: String) throws(RallyClientError) -> GroupRecord {
        let record = try group(groupID)
        let label = "\"\(record.state.profile.name)\" (\(groupID))"
        guard record.status == .active else { throw .group(.notActive(label, record.status)) }
        if let reason = record.divergence { throw .group(.diverged(group: label, reason: reason)) }
        return record
    }

    /// Timed messages whose time is up disappear from this home.
    func deleteExpiredMessages() throws(RallyClientError) {
        let now = context.clock.now()
        try context.stored { () throws(LocalStoreError) in try context.store.deleteExpiredMessages(now: now) }
    }

    // MARK: Reading

    /// Reads the group log from the stored cursor up to its head.
    @discardableResult
    func sync(_ reference: String) async throws(RallyClientError) -> GroupSyncReport {
        let collector = GroupSyncCollector()
        try await follow(reference, untilCaughtUp: true) { event in await collector.add(event) }
        try deleteExpiredMessages()
        return await collector.report
    }

    /// Streams a group's log: every entry is applied and persisted before
    /// `handler` sees it.
    func follow(
        _ reference: String, untilCaughtUp: Bool, handler: @Sendable (GroupLogEvent) async -> Void
    ) async throws(RallyClientError) {
        let record = try group(reference)
        let groupID = record.groupID
        let topic = record.topic
        let processor = GroupLogProcessor(identity: context.identity, codecs: context.codecs)
        let store = context.store
        do {
            try await context.followTopic(
                topic, untilCaughtUp: untilCaughtUp,
                access: { () throws(RallyClientError) -> TopicAccess? in
                    let record: GroupRecord?
                    do throws(LocalStoreError) {
                        record = try store.group(groupID)
                    } catch {
                        throw .store(error)
                    }
                    return record?.topicAccess
                }
            ) { envelope throws(RallyClientError) in
                let event = try await ingest(envelope, groupID: groupID, processor: processor)
                await handler(event)
            } readElsewhere: { envelope throws(RallyClientError) in
                // Applied by another reader of this home: its message (if
                // the entry was one) is shown as stored; a commit's outcome
                // was reported where it was applied.
                if let stored = try context.storedMessage(at: envelope) { await handler(.message(stored)) }
            }
        } catch .relay(.refused(.topicDeleted, _)) {
            // Only a holder of the topic's current key can delete it: a
            // member (the owner, after its delete commit). The relay could
            // claim it falsely, but it can always withhold a group anyway.
            let record = try group(groupID)
            guard record.status != .deleted else { return }
            try context.stored { () throws(LocalStoreError) in try store.markGroupDeleted(groupID) }
            context.logger.notice("group \(groupID): the relay says the group was deleted")
            await handler(.deletedOnRelay)
        } catch .relay(.accessRevoked(_, let lastReadable)) {
            // The relay ended this member's access. Removed or gone: as
            // expected. Still a member here: the change that ended it was
            // never shown to this device.
            let record = try group(groupID)
            guard record.status == .active else { return }
            let seq = try context.stored { () throws(LocalStoreError) in try store.cursor(for: record.topic) }
            let reason =
                "the relay ended this device's access to the group at entry #\(lastReadable), but this device, which has read up to #\(seq), was shown no change there"
            try context.stored { () throws(LocalStoreError) in try store.setDivergence(reason, group: groupID) }
            context.logger.error("group \(groupID): \(reason)")
            await handler(.diverged(seq: seq, reason: reason))
        }
    }

    private func ingest(
        _ envelope: WireEnvelope, groupID: String, processor: GroupLogProcessor
    ) async throws(RallyClientError) -> GroupLogEvent {
        let store = context.store
        let logger = context.logger
        let record = try context.stored { () throws(LocalStoreError) in try store.group(groupID) }
        guard let record else { throw .group(.unknownGroup(groupID)) }
        let result: GroupLogProcessor.Result
        do {
            // A store error stops here: the cursor stays before this entry
            // and the next sync reads it again. Nothing is skipped.
            result = try processor.process(
                envelope, record: record, key: { epoch in try store.epochKey(group: groupID, epoch: epoch) },
                receivedAt: context.clock.now())
        } catch let error as LocalStoreError {
            throw .store(error)
        } catch {
            throw .store(.failed("\(error)"))
        }
        var message: StoredMessage?
        var ownCommit: (commitID: Data, rejection: String?)?
        var deletingMessagesOf: [InboxID] = []
        if case .commit(_, _, _, .applied(let effects)) = result.event {
            for case .messagesDeleted(let inboxes) in effects { deletingMessagesOf += inboxes }
        }
        switch result.event {
        case .message(let received):
            // A deletion is carried out, not kept.
            message = result.deletion == nil ? received : nil
        case .rejected(let seq, let reason):
            logger.warning("group \(groupID): dropped entry #\(seq): \(reason)")
        case .diverged(let seq, let reason):
            logger.error("group \(groupID): history diverged at entry #\(seq): \(reason)")
        case .commit(_, let commitID, let author, let outcome) where author == context.identity.inboxID:
            await ownOutcomes.record(outcome, for: commitID)
            switch outcome {
            case .applied, .duplicate: ownCommit = (commitID, nil)
            case .rejected(let rejection): ownCommit = (commitID, rejection.description)
            }
        case .commit, .deletedOnRelay:
            break
        }
        try context.stored { () throws(LocalStoreError) in
            try store.ingestGroupEntry(
                result.record, recordChanged: result.record != record, seq: envelope.seq, epochKey: result.newKey,
                message: message,
                inviteSeed: result.inviteSeed, ownCommit: ownCommit,
                accessSecretChanged: result.record.accessSecret != record.accessSecret,
                deletingMessagesOf: deletingMessagesOf, messageExpiresAt: result.messageExpiresAt,
                deletion: result.deletion)
            if result.record.status == .deleted, record.status != .deleted { try store.markGroupDeleted(groupID) }
        }
        return result.event
    }
}

private actor GroupSyncCollector {
    var report = GroupSyncReport()
    func add(_ event: GroupLogEvent) { report.events.append(event) }
}
