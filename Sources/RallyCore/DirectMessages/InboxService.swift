import Foundation
import RallyCrypto
import RallyWire

/// What following the inbox reports.
public enum InboxEvent: Sendable {
    case message(StoredMessage)
    case rejected(InboxRejection)
    /// Everything sent before this point has been received.
    case caughtUp
}

/// What an inbox sync saw.
public struct InboxSyncReport: Sendable {
    public var received: [StoredMessage] = []
    public var rejected: [InboxRejection] = []
}

/// This identity's inbox: direct messages, and what other capabilities
/// receive through it — group welcomes (``GroupWelcomes``) and join answers
/// (``JoinService``). Every envelope is stored with the inbox cursor in one
/// transaction before anyone sees it.
struct InboxService: Sendable {
    let context: ClientContext
    let welcomes: GroupWelcomes
    let joins: JoinService
    let groups: GroupService
    let leaves: CancelledJoinLeaves
    let nominees: NomineeService

    /// Fetches everything that arrived since the stored cursor, stores it
    /// and returns what was new.
    func sync() async throws(RallyClientError) -> InboxSyncReport {
        let collector = InboxSyncCollector()
        try await follow(untilCaughtUp: true) { event in await collector.add(event) }
        return await collector.report
    }

    /// Streams the inbox from the stored cursor: backlog, then live. With
    /// `untilCaughtUp`, returns once the backlog is done; otherwise runs
    /// until the task is cancelled, reconnecting after drops.
    func follow(untilCaughtUp: Bool, handler: @Sendable (InboxEvent) async -> Void) async throws(RallyClientError) {
        let processor = InboxProcessor(identity: context.identity, codecs: context.codecs)
        let topic = context.inboxTopic
        try await context.followTopic(topic, untilCaughtUp: untilCaughtUp) { envelope throws(RallyClientError) in
            try await ingest(envelope, topic: topic, processor: processor, handler: handler)
        } readElsewhere: { envelope throws(RallyClientError) in
            // Stored by another reader of this home: shown as stored.
            if let stored = try context.storedMessage(at: envelope) { await handler(.message(stored)) }
        } caughtUp: {
            await handler(.caughtUp)
        }
    }

    private func ingest(
        _ envelope: WireEnvelope, topic: TopicName, processor: InboxProcessor,
        handler: @Sendable (InboxEvent) async -> Void
    ) async throws(RallyClientError) {
        let store = context.store
        let now = context.clock.now()
        switch processor.processDecoded(envelope, receivedAt: now) {
        case .success(let (message, value)):
            let isNew: Bool
            if NomineeService.handles(message) {
                // Acted on before the cursor moves (idempotently), so a
                // crash in between acts again rather than never; only the
                // invitation itself is kept as a message.
                try await nominees.handle(message)
                let kept = NomineeService.keepsMessage(message) ? message : nil
                isNew = try context.stored { () throws(LocalStoreError) in
                    try store.ingest(topic: topic, seq: envelope.seq, message: kept, now: now)
                }
            } else if message.contentType == GroupWelcomeCodec.contentType.description,
                let welcome = value as? WireGroupWelcome
            {
                let taken = try await welcomes.take(
                    welcome, message: message, topic: topic, seq: envelope.seq,
                    join: joins.match(welcome, from: message.sender))
                isNew = taken.isNew
                if let groupID = taken.leave { await leaves.add(groupID) }
            } else if !message.outgoing,
                !GroupService.acceptsDirect(message, codecs: context.codecs, store: store)
            {
                // A member's direct message the group's preference does not
                // allow (or from someone who is not a member): dropped.
                context.logger.warning("dropped a group direct message from \(message.sender): not allowed here")
                isNew = try context.stored { () throws(LocalStoreError) in
                    try store.ingest(topic: topic, seq: envelope.seq, message: nil, now: now)
                }
            } else {
                let answer = joins.answer(in: message)
                isNew = try context.stored { () throws(LocalStoreError) in
                    try store.ingest(topic: topic, seq: envelope.seq, message: message, joinEvent: answer, now: now)
                }
            }
            if isNew {
                await handler(.message(message))
            } else if let stored = try context.storedMessage(at: envelope) {
                // Another reader of this home stored this very entry while
                // this one processed it; a duplicate elsewhere in the
                // inbox is stored at another place and not shown again.
                await handler(.message(stored))
            }
            await leaveCancelledJoins()
        case .failure(let rejection):
            context.logger.warning("\(rejection)")
            try context.stored { () throws(LocalStoreError) in
                try store.ingest(topic: topic, seq: envelope.seq, message: nil, now: now)
            }
            await handler(.rejected(rejection))
        }
    }

    /// Leaves the groups this client was admitted to after cancelling the
    /// join, so a cancelled join leaves no membership. A failure is logged;
    /// the next sync tries again.
    private func leaveCancelledJoins() async {
        for groupID in await leaves.pending {
            do {
                try await groups.leave(groupID)
                await leaves.done(groupID)
            } catch {
                context.logger.warning("could not leave \(groupID), joined after cancelling: \(error)")
            }
        }
    }
}

private actor InboxSyncCollector {
    var report = InboxSyncReport()

    func add(_ event: InboxEvent) {
        switch event {
        case .message(let message): report.received.append(message)
        case .rejected(let rejection): report.rejected.append(rejection)
        case .caughtUp: break
        }
    }
}
