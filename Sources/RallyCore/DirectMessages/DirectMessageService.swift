import Foundation
import RallyCrypto
import RallyWire

/// Sending direct messages: signed by this identity, sealed to the
/// recipient's keys, posted to the recipient's inbox.
struct DirectMessageService: Sendable {
    let context: ClientContext
    let keys: KeyDirectory

    init(context: ClientContext) {
        self.context = context
        self.keys = KeyDirectory(context: context)
    }

    /// Signs, seals and posts a message to the recipient's inbox. Retried
    /// publishes reuse the message id as idempotency key, so the recipient
    /// gets it once whatever happens to the acks.
    func send<C: ContentCodec>(
        _ value: C.Value, codec: C, to recipient: InboxID, messageID: Data?, keepCopy: Bool
    ) async throws(RallyClientError) -> StoredMessage {
        let recipientIdentity = try await keys.lookUp(recipient)
        return try await send([(value, recipientIdentity, messageID)], codec: codec, keepCopy: keepCopy)[0]
    }

    /// Several messages, each to the keys given (which the caller has
    /// verified), queued in one transaction and sent by one flush: what a
    /// round of welcomes to newly admitted joiners takes.
    func send<C: ContentCodec>(
        _ messages: [(value: C.Value, recipient: PublicIdentity, messageID: Data?)], codec: C, keepCopy: Bool
    ) async throws(RallyClientError) -> [StoredMessage] {
        let now = context.clock.now()
        var queued: [(message: StoredMessage?, item: OutboxRecord)] = []
        var stored: [StoredMessage] = []
        // A round of welcomes carries the group's whole state in each: what
        // they all start with is deflated once.
        let contents: [WireEncodedContent]
        do {
            contents = ContentCompression.compressedSharingHead(
                try messages.map { message throws(ContentError) in
                    try context.codecs.encode(message.value, with: codec)
                })
        } catch {
            throw .content(error)
        }
        // Signing and sealing are the CPU-bound part, a key agreement and a
        // signature each over the whole welcome: a batch is prepared on
        // every core.
        let prepared = await Array(messages.indices).mapOnEveryCore { index in
            let (value, recipient, messageID) = messages[index]
            return Result { () throws(RallyClientError) in
                try prepare(
                    value, codec: codec, content: contents[index], to: recipient, messageID: messageID, at: now)
            }
        }
        for result in prepared {
            let (message, item) = try result.get()
            queued.append((keepCopy ? message : nil, item))
            stored.append(message)
        }
        try context.stored { () throws(LocalStoreError) in try context.store.queueOutgoing(queued) }
        let outcomes = try await context.outbox.flush()
        var sent: [StoredMessage] = []
        sent.reserveCapacity(stored.count)
        for message in stored {
            switch outcomes[message.id] {
            case .sent(let seq)?:
                sent.append(message.withSeq(seq))
            case .failed(let error)?:
                throw error
            case .queued?, nil:
                // Another process's flush may have sent it meanwhile.
                if let current = try? context.store.message(id: message.id), current.seq != nil {
                    sent.append(current)
                } else {
                    sent.append(message)
                }
            }
        }
        return sent
    }

    /// One message sealed, as this home keeps it and as the outbox sends it.
    private func prepare<C: ContentCodec>(
        _ value: C.Value, codec: C, content: WireEncodedContent, to recipient: PublicIdentity, messageID: Data?,
        at now: Date
    ) throws(RallyClientError) -> (message: StoredMessage, item: OutboxRecord) {
        let (sealed, body) = try seal(content, to: recipient, messageID: messageID, at: now)
        let content = body.content
        let topic = try! TopicName.inbox(recipient.inboxID.rawValue)
        let decoded = context.codecs.described(value, encodedBy: codec, as: content)
        let message = StoredMessage(
            id: body.messageID.hexString, conversation: recipient.inboxID.rawValue, outgoing: true,
            sender: context.identity.inboxID, senderName: context.identity.displayName, sentAt: now,
            receivedAt: now, topic: topic.rawValue, seq: nil, contentType: decoded.contentType.description,
            encodedContent: FrameCodec.encode(context.codecs.keptContent(content, decodedAs: decoded.value)),
            displayText: decoded.displayText,
            isKnownType: decoded.isKnown)
        // Queued with the message in one transaction, then sent with
        // everything queued before it: a message typed while the relay
        // is out of reach waits in the home, not in memory.
        let item = OutboxRecord(
            messageID: message.id, topic: topic.rawValue, payload: sealed, idempotencyKey: body.messageID,
            shouldPush: content.shouldPush, queuedAtMs: ClientClock.millis(now), attempts: 0)
        return (message, item)
    }

    /// A message signed by this identity and sealed to `recipient`: what
    /// `send` posts to an inbox, and what an escrow keeps for a nominee.
    func seal<C: ContentCodec>(
        _ value: C.Value, codec: C, to recipient: PublicIdentity, messageID: Data?, at now: Date
    ) throws(RallyClientError) -> (sealed: Data, body: WireMessageBody) {
        let content: WireEncodedContent
        do {
            content = ContentCompression.compressedIfUseful(try context.codecs.encode(value, with: codec))
        } catch {
            throw .content(error)
        }
        return try seal(content, to: recipient, messageID: messageID, at: now)
    }

    /// Encoded (and maybe compressed) content signed and sealed.
    private func seal(
        _ content: WireEncodedContent, to recipient: PublicIdentity, messageID: Data?, at now: Date
    ) throws(RallyClientError) -> (sealed: Data, body: WireMessageBody) {
        let identity = context.identity
        var body = WireMessageBody()
        body.messageID = messageID ?? MessageSealing.newMessageID()
        body.sender = identity.publicIdentity.wireBundle
        body.recipient = recipient.inboxID.rawValue
        body.sentAtMs = ClientClock.millis(now)
        body.content = content
        let sealed: Data
        do {
            sealed = try MessageSealing.seal(MessageSealing.sign(body, by: identity), to: recipient)
        } catch {
            throw .recipientKeysInvalid(recipient.inboxID, reason: error.description)
        }
        guard sealed.count <= WireLimits.maxPayloadBytes else {
            throw .messageTooLarge(size: sealed.count, limit: WireLimits.maxPayloadBytes)
        }
        return (sealed, body)
    }

    /// Direct messages stored here (sent and received), oldest first;
    /// never group messages.
    func directMessages() throws(RallyClientError) -> [StoredMessage] {
        try context.stored { () throws(LocalStoreError) in try context.store.directMessages() }
    }
}
