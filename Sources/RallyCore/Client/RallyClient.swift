import Foundation
import Logging
import RallyCrypto
import RallyWire

/// The client SDK's entry point: one identity, its local store and its
/// connection to a relay.
public actor RallyClient {
    public enum InboxEvent: Sendable {
        case message(StoredMessage)
        case rejected(InboxRejection)
        /// Everything sent before this point has been received.
        case caughtUp
    }

    /// How often a publish is retried on a new connection after a transient
    /// failure, with the same idempotency key.
    public static let publishAttempts = 5

    public nonisolated let identity: Identity
    public nonisolated let store: LocalStore
    public nonisolated let relayURL: URL
    public nonisolated let codecs: CodecRegistry
    let logger: Logger
    private var connection: RelayConnection?
    /// Clients of the invite identities (current and retired) of groups
    /// this identity administers, by their inbox id: they read the join
    /// requests.
    var inviteClients: [String: RallyClient] = [:]
    /// Outcomes of this identity's own commits, by commit id, however they
    /// were read (a live follower may read a commit before the sync that
    /// published it does). Taken out when the publisher checks.
    var ownCommitOutcomes: [Data: GroupOutcome] = [:]
    /// Groups this client was admitted to after it cancelled the join.
    var groupsToLeave: Set<String> = []
    /// Test seam: runs between building a commit and publishing it, so a
    /// test can make another member's commit win the race deterministically.
    var commitRaceHook: (@Sendable (Int) async -> Void)?

    func setCommitRaceHook(_ hook: (@Sendable (Int) async -> Void)?) {
        commitRaceHook = hook
    }

    public nonisolated var inboxID: InboxID { identity.inboxID }
    public nonisolated var inboxTopic: TopicName {
        // An inbox id is 32 base32 characters, always a valid topic id.
        try! TopicName.inbox(identity.inboxID.rawValue)
    }

    init(identity: Identity, store: LocalStore, relayURL: URL, codecs: CodecRegistry, logger: Logger) {
        self.identity = identity
        self.store = store
        self.relayURL = relayURL
        self.codecs = codecs
        self.logger = logger
    }

    /// Creates a new identity in `home`, stores it and publishes its key
    /// bundle on the relay. Secret keys go to `secrets` (say, the Keychain;
    /// see ``SecretStore``), or without one to the home's owner-only
    /// database.
    public static func create(
        home: URL, relayURL: URL, displayName: String, codecs: CodecRegistry = .standard,
        logger: Logger = Logger(label: "rally.client"), secrets: (any SecretStore)? = nil
    ) async throws(RallyClientError) -> RallyClient {
        let store: LocalStore
        do {
            store = try LocalStore(home: home, secrets: secrets)
            if try store.loadIdentity() != nil { throw LocalStoreError.identityExists(home.path) }
        } catch let error as LocalStoreError {
            throw .store(error)
        } catch {
            throw .store(.failed("\(error)"))
        }
        let identity = Identity(displayName: displayName)
        let client = RallyClient(identity: identity, store: store, relayURL: relayURL, codecs: codecs, logger: logger)
        try await client.publishKeyBundle()
        do {
            try store.saveIdentity(identity)
        } catch {
            throw .store(error)
        }
        return client
    }

    /// Opens the identity stored in `home`, with the secret store it was
    /// created with (nil: the home's owner-only database).
    public static func open(
        home: URL, relayURL: URL, codecs: CodecRegistry = .standard, logger: Logger = Logger(label: "rally.client"),
        secrets: (any SecretStore)? = nil
    ) throws(RallyClientError) -> RallyClient {
        do {
            let store = try LocalStore(home: home, secrets: secrets)
            guard let identity = try store.loadIdentity() else { throw RallyClientError.noIdentity(home: home.path) }
            return RallyClient(identity: identity, store: store, relayURL: relayURL, codecs: codecs, logger: logger)
        } catch let error as RallyClientError {
            throw error
        } catch let error as LocalStoreError {
            throw .store(error)
        } catch {
            throw .store(.failed("\(error)"))
        }
    }

    // MARK: Connection

    /// The open connection, or a new authenticated one.
    public func connected() async throws(RallyClientError) -> RelayConnection {
        if let connection, await connection.isOpen { return connection }
        do {
            let fresh = try await RelayConnection.connect(to: relayURL, identity: identity, logger: logger)
            connection = fresh
            return fresh
        } catch {
            throw .relay(error)
        }
    }

    public func disconnect() async {
        await connection?.close()
        connection = nil
    }

    /// Runs `operation` on a connection, reconnecting and retrying on
    /// transient failures. Only for idempotent operations.
    func withRetries<T: Sendable>(
        _ what: String, _ operation: (RelayConnection) async throws(RelayClientError) -> T
    ) async throws(RallyClientError) -> T {
        var lastError = RelayClientError.disconnected("no attempt made")
        for attempt in 1...Self.publishAttempts {
            let connection: RelayConnection
            do {
                connection = try await connected()
            } catch .relay(let error) where error.isTransient {
                lastError = error
                await backoff(attempt, what: what, error: error)
                continue
            }
            do {
                return try await operation(connection)
            } catch {
                guard error.isTransient else { throw .relay(error) }
                lastError = error
                if case .refused = error {} else { await disconnect() }
                await backoff(attempt, what: what, error: error)
            }
        }
        throw .relay(lastError)
    }

    func backoff(_ attempt: Int, what: String, error: RelayClientError) async {
        logger.info("retrying \(what) after: \(error)")
        guard attempt < Self.publishAttempts else { return }
        let base = 0.1 * Double(1 << min(attempt, 6))
        try? await Task.sleep(for: .seconds(base * Double.random(in: 0.5...1.5)))
    }

    // MARK: Keys

    public func publishKeyBundle() async throws(RallyClientError) {
        let bundle = identity.signedKeyBundle()
        try await withRetries("key bundle") { connection throws(RelayClientError) in
            try await connection.putKeyBundle(bundle)
        }
    }

    /// The verified public identity of an inbox: from the local cache, or
    /// fetched from the relay and checked (signature, and that its keys
    /// really hash to the requested inbox id).
    public func lookUp(_ inbox: InboxID) async throws(RallyClientError) -> PublicIdentity {
        if inbox == identity.inboxID { return identity.publicIdentity }
        do {
            if let known = try store.contact(inbox) { return known }
        } catch {
            throw .store(error)
        }
        let signed = try await withRetries("key lookup") { connection throws(RelayClientError) in
            try await connection.keyBundle(for: inbox)
        }
        guard let signed else { throw .unknownRecipient(inbox) }
        let verified: PublicIdentity
        do {
            verified = try PublicIdentity(verifying: signed)
        } catch {
            throw .recipientKeysInvalid(inbox, reason: error.description)
        }
        guard verified.inboxID == inbox else {
            throw .recipientKeysInvalid(inbox, reason: "the keys belong to \(verified.inboxID)")
        }
        do {
            try store.saveContact(verified)
        } catch {
            throw .store(error)
        }
        return verified
    }

    // MARK: Direct messages

    public func sendText(_ text: String, to recipient: InboxID) async throws(RallyClientError) -> StoredMessage {
        try await send(text, codec: TextCodec(), to: recipient)
    }

    /// Signs, seals and posts a message to the recipient's inbox. Retried
    /// publishes reuse the message id as idempotency key, so the recipient
    /// gets it once whatever happens to the acks.
    public func send<C: ContentCodec>(
        _ value: C.Value, codec: C, to recipient: InboxID, messageID: Data? = nil, keepCopy: Bool = true
    ) async throws(RallyClientError)
        -> StoredMessage
    {
        let recipientIdentity = try await lookUp(recipient)
        let content: WireEncodedContent
        do {
            let plain = try codecs.encode(value, with: codec)
            content = ContentCompression.compressedIfUseful(plain)
        } catch {
            throw .content(error)
        }
        let now = Date()
        var body = WireMessageBody()
        body.messageID = messageID ?? MessageSealing.newMessageID()
        body.sender = identity.publicIdentity.wireBundle
        body.recipient = recipient.rawValue
        body.sentAtMs = LocalStore.millis(now)
        body.content = content
        let sealed: Data
        do {
            sealed = try MessageSealing.seal(MessageSealing.sign(body, by: identity), to: recipientIdentity)
        } catch {
            throw .recipientKeysInvalid(recipient, reason: error.description)
        }
        guard sealed.count <= WireLimits.maxPayloadBytes else {
            throw .messageTooLarge(size: sealed.count, limit: WireLimits.maxPayloadBytes)
        }
        let topic = try! TopicName.inbox(recipient.rawValue)
        let messageID = body.messageID
        let ack = try await withRetries("publish") { connection throws(RelayClientError) in
            try await connection.publish(
                topic: topic, payload: sealed, idempotencyKey: messageID, shouldPush: content.shouldPush)
        }
        let decoded = codecs.decode(content)
        let stored = StoredMessage(
            id: messageID.hexString, conversation: recipient.rawValue, outgoing: true, sender: identity.inboxID,
            senderName: identity.displayName, sentAt: now, receivedAt: now, topic: topic.rawValue, seq: ack.seq,
            contentType: decoded.contentType.description, encodedContent: FrameCodec.encode(content),
            displayText: decoded.displayText, isKnownType: decoded.isKnown)
        guard keepCopy else { return stored }
        do {
            try store.saveOutgoing(stored)
        } catch {
            throw .store(error)
        }
        return stored
    }

    // MARK: Inbox sync

    /// Fetches everything that arrived in the inbox since the stored cursor,
    /// stores it and returns what was new.
    public func syncInbox() async throws(RallyClientError) -> InboxSyncReport {
        let collector = InboxSyncCollector()
        try await followInbox(untilCaughtUp: true) { event in
            await collector.add(event)
        }
        return await collector.report
    }

    /// Streams the inbox from the stored cursor: backlog, then live. Every
    /// event is persisted (message and cursor together) before `handler`
    /// sees it. With `untilCaughtUp`, returns once the backlog is done;
    /// otherwise runs until the task is cancelled, reconnecting after drops.
    public func followInbox(
        untilCaughtUp: Bool, handler: @Sendable (InboxEvent) async -> Void
    ) async throws(RallyClientError) {
        let processor = InboxProcessor(identity: identity, codecs: codecs)
        let topic = inboxTopic
        try await followTopic(topic, untilCaughtUp: untilCaughtUp) { envelope throws(RallyClientError) in
            try await self.ingest(envelope, topic: topic, processor: processor, handler: handler)
        } caughtUp: {
            await handler(.caughtUp)
        }
    }

    /// Subscribes to a topic from its stored cursor and hands each envelope
    /// to `process` in seq order. With `untilCaughtUp`, returns once the
    /// backlog is processed; otherwise follows live until cancelled,
    /// reconnecting (and resubscribing from the cursor) after drops.
    func followTopic(
        _ topic: TopicName, untilCaughtUp: Bool,
        access: () throws(RallyClientError) -> TopicAccess? = { nil },
        process: @Sendable (WireEnvelope) async throws(RallyClientError) -> Void,
        caughtUp: @Sendable () async -> Void = {}
    ) async throws(RallyClientError) {
        // A live follower has a connection of its own: the relay keeps one
        // subscription per topic and connection, so a one-shot sync of the
        // same topic on the shared connection would otherwise end it.
        var live: RelayConnection?
        do {
            try await followTopic(
                topic, untilCaughtUp: untilCaughtUp, live: &live, access: access, process: process,
                caughtUp: caughtUp)
        } catch {
            await live?.close()
            throw error
        }
        await live?.close()
    }

    private func liveConnection(_ live: inout RelayConnection?) async throws(RallyClientError) -> RelayConnection {
        if let open = live, await open.isOpen { return open }
        do {
            let fresh = try await RelayConnection.connect(to: relayURL, identity: identity, logger: logger)
            live = fresh
            return fresh
        } catch {
            throw .relay(error)
        }
    }

    private func followTopic(
        _ topic: TopicName, untilCaughtUp: Bool, live: inout RelayConnection?,
        access: () throws(RallyClientError) -> TopicAccess?,
        process: @Sendable (WireEnvelope) async throws(RallyClientError) -> Void,
        caughtUp: @Sendable () async -> Void
    ) async throws(RallyClientError) {
        var attempt = 0
        while !Task.isCancelled {
            let connection: RelayConnection
            do {
                connection = try await untilCaughtUp ? connected() : liveConnection(&live)
            } catch .relay(let error) where !untilCaughtUp && error.isTransient {
                attempt += 1
                await backoff(min(attempt, Self.publishAttempts - 1), what: "subscription to \(topic)", error: error)
                continue
            }
            let cursor: UInt64
            do {
                cursor = try store.cursor(for: topic)
            } catch {
                throw .store(error)
            }
            let key = try access()
            let events = await connection.subscribe(topic: topic, after: cursor, access: key)
            do {
                for try await event in events {
                    attempt = 0
                    switch event {
                    case .envelope(let envelope):
                        // Anything at or below the cursor was handled
                        // already (a backlog overlapping a reconnect).
                        guard envelope.seq > (try store.cursor(for: topic)) else { continue }
                        try await process(envelope)
                    case .caughtUp:
                        await caughtUp()
                        if untilCaughtUp {
                            await connection.unsubscribe(topic: topic)
                            return
                        }
                    }
                }
                if untilCaughtUp { throw RallyClientError.relay(.disconnected("subscription ended")) }
            } catch let error as RallyClientError {
                throw error
            } catch let error as LocalStoreError {
                throw .store(error)
            } catch let error as RelayClientError {
                if case .accessRevoked = error {
                    // The key this subscription used was replaced at an
                    // entry it has now read. With the new key from that
                    // entry, read on; without one, the caller judges why
                    // (removed, or a change this device was never shown).
                    guard let current = try access(), current.publicKey != key?.publicKey else {
                        throw .relay(error)
                    }
                    continue
                }
                guard error.isTransient, !untilCaughtUp else { throw .relay(error) }
                await live?.close()
                live = nil
                attempt += 1
                await backoff(min(attempt, Self.publishAttempts - 1), what: "subscription to \(topic)", error: error)
            } catch {
                throw .relay(.disconnected("\(error)"))
            }
        }
    }

    private func ingest(
        _ envelope: WireEnvelope, topic: TopicName, processor: InboxProcessor,
        handler: @Sendable (InboxEvent) async -> Void
    ) async throws(RallyClientError) {
        switch processor.process(envelope, receivedAt: Date()) {
        case .success(let message):
            let isNew: Bool
            if let welcome = GroupWelcomeCodec.welcome(in: message, codecs: codecs) {
                isNew = try await acceptWelcome(welcome, message: message, topic: topic, seq: envelope.seq)
            } else {
                do {
                    isNew = try store.ingest(
                        topic: topic, seq: envelope.seq, message: message, joinEvent: joinEvent(in: message))
                } catch {
                    throw .store(error)
                }
            }
            if isNew { await handler(.message(message)) }
            if !groupsToLeave.isEmpty { await leaveCancelledJoins() }
        case .failure(let rejection):
            logger.warning("\(rejection)")
            do {
                try store.ingest(topic: topic, seq: envelope.seq, message: nil)
            } catch {
                throw .store(error)
            }
            await handler(.rejected(rejection))
        }
    }
}

private actor InboxSyncCollector {
    var report = InboxSyncReport()

    func add(_ event: RallyClient.InboxEvent) {
        switch event {
        case .message(let message): report.received.append(message)
        case .rejected(let rejection): report.rejected.append(rejection)
        case .caughtUp: break
        }
    }
}

public struct InboxSyncReport: Sendable {
    public var received: [StoredMessage] = []
    public var rejected: [InboxRejection] = []
}
