public import Foundation
import HummingbirdWSClient
public import Logging
import NIOCore
public import RallyCrypto
public import RallyWire

/// One WebSocket connection to a relay: request/reply matching by request
/// id, and per-topic subscription streams. It does not reconnect by itself;
/// the owner decides when to open a new one (and resubscribes from its
/// cursors, so nothing is lost across connections).
public actor RelayConnection: RelayLink {
    public typealias SubscriptionEvent = RelaySubscriptionEvent

    public static let defaultTimeout: Duration = .seconds(15)
    /// How often an otherwise quiet connection pings, so the relay's idle
    /// timeout (5 minutes by default) does not close a live subscription.
    public static let keepAliveInterval: Duration = .seconds(60)

    public nonisolated let relayURL: URL
    /// The relay's origin as signatures bind it (`RelayOrigin`): the
    /// authentication and every topic proof on this connection.
    public nonisolated let origin: String
    private let logger: Logger
    private var writer: WebSocketOutboundWriter?
    private var nextRequestID: UInt64 = 1
    private var pending: [UInt64: PendingRequest] = [:]
    /// Fails requests whose reply is overdue: one task per connection,
    /// asleep until the earliest deadline, not a timer task per request.
    private var timeoutSweep: (task: Task<Void, Never>, wakesAt: ContinuousClock.Instant)?
    private var subscriptions: [String: AsyncThrowingStream<SubscriptionEvent, any Error>.Continuation] = [:]
    /// Subscriptions waiting for their `Subscribed` reply, by request id.
    private var subscribeReplies: [UInt64: AsyncThrowingStream<SubscriptionEvent, any Error>.Continuation] = [:]
    private var challengeWaiter: CheckedContinuation<WireChallenge, any Error>?
    private var challenge: WireChallenge?
    private var closedError: RelayClientError?
    private var runTask: Task<Void, Never>?
    private var keepAliveTask: Task<Void, Never>?
    public private(set) var authenticatedInbox: InboxID?

    private init(relayURL: URL, logger: Logger) {
        self.relayURL = relayURL
        self.origin = RelayOrigin.of(relayURL) ?? RelayOrigin.of(URL(string: Self.webSocketURL(for: relayURL))!) ?? ""
        self.logger = logger
    }

    /// The challenge nonce of this connection (proofs are bound to it).
    public var challengeNonce: Data? { challenge?.nonce }

    /// A topic proof for `topic` on this connection, or nil for an inbox.
    /// What a proof signs is the same for every request on one connection
    /// (origin, challenge, topic), so each topic and key is signed once.
    private func proof(_ access: TopicAccess?, topic: TopicName) -> WireTopicProof? {
        guard let access, let challenge else { return nil }
        let key = SignedProofKey(topic: topic.rawValue, accessKey: access.publicKey)
        if let signed = signedProofs[key] { return signed }
        let proof = access.connectionProof(origin: origin, challengeNonce: challenge.nonce, topic: topic.rawValue)
        if signedProofs.count >= Self.maxSignedProofs { signedProofs.removeAll(keepingCapacity: true) }
        signedProofs[key] = proof
        return proof
    }

    private struct SignedProofKey: Hashable {
        let topic: String
        let accessKey: Data
    }
    /// Bounds the proofs kept per connection; a client writing to more
    /// topics than this signs again, nothing more.
    static let maxSignedProofs = 256
    private var signedProofs: [SignedProofKey: WireTopicProof] = [:]

    /// Opens a connection, waits for the relay's challenge and, given an
    /// identity, authenticates as it.
    public static func connect(
        to relayURL: URL, identity: Identity?, logger: Logger = Logger(label: "rally.connection")
    ) async throws(RelayClientError) -> RelayConnection {
        let connection = RelayConnection(relayURL: relayURL, logger: logger)
        try await connection.start()
        if let identity {
            try await connection.authenticate(identity)
        }
        return connection
    }

    public static func webSocketURL(for relayURL: URL) -> String {
        var components = URLComponents(url: relayURL, resolvingAgainstBaseURL: false) ?? URLComponents()
        components.scheme = components.scheme == "https" || components.scheme == "wss" ? "wss" : "ws"
        let base = components.path.hasSuffix("/") ? String(components.path.dropLast()) : components.path
        components.path = base + "/v1/ws"
        return components.string ?? "ws://127.0.0.1:8080/v1/ws"
    }

    private func start() async throws(RelayClientError) {
        let url = Self.webSocketURL(for: relayURL)
        var configuration = WebSocketClientConfiguration()
        configuration.maxFrameSize = WireLimits.maxFrameBytes
        let logger = self.logger
        runTask = Task {
            do {
                try await WebSocketClient.connect(url: url, configuration: configuration, logger: logger) {
                    inbound, outbound, _ in
                    await self.attach(outbound)
                    var messages = inbound.messages(maxSize: WireLimits.maxFrameBytes).makeAsyncIterator()
                    while let message = try await messages.next() {
                        guard case .binary(let buffer) = message else { continue }
                        await self.receive(Data(buffer.readableBytesView))
                    }
                }
                self.closed(.disconnected("the relay closed the connection"))
            } catch {
                self.closed(self.writer == nil ? .unreachable(url: url, reason: "\(error)") : .disconnected("\(error)"))
            }
        }
        do {
            challenge = try await withTimeout(Self.defaultTimeout, what: "challenge") {
                try await withTaskCancellationHandler {
                    try await withCheckedThrowingContinuation { continuation in
                        Task { await self.awaitChallenge(continuation) }
                    }
                } onCancel: {
                    Task { await self.cancelChallengeWait() }
                }
            }
        } catch let error as RelayClientError {
            await close()
            throw error
        } catch {
            await close()
            throw .disconnected("\(error)")
        }
        keepAliveTask = Task { [weak self] in
            while true {
                do {
                    try await Task.sleep(for: Self.keepAliveInterval)
                } catch {
                    return
                }
                guard let self, await self.isOpen else { return }
                try? await self.ping()
            }
        }
    }

    private func cancelChallengeWait() {
        challengeWaiter?.resume(throwing: RelayClientError.timedOut("challenge"))
        challengeWaiter = nil
    }

    private func awaitChallenge(_ continuation: CheckedContinuation<WireChallenge, any Error>) {
        if let challenge {
            continuation.resume(returning: challenge)
        } else if let closedError {
            continuation.resume(throwing: closedError)
        } else {
            challengeWaiter = continuation
        }
    }

    private func attach(_ outbound: WebSocketOutboundWriter) {
        writer = outbound
    }

    public var maxPayloadBytes: Int {
        challenge.map { Int($0.maxPayloadBytes) } ?? WireLimits.maxPayloadBytes
    }

    private func authenticate(_ identity: Identity) async throws(RelayClientError) {
        guard let challenge else { throw .protocolViolation("no challenge received") }
        var frame = WireClientFrame()
        frame.authenticate = identity.authenticate(challengeNonce: challenge.nonce, origin: origin)
        let reply = try await request(frame)
        guard case .authenticated(let authenticated)? = reply.body else {
            throw .protocolViolation("expected authenticated, got \(String(describing: reply.body))")
        }
        authenticatedInbox = try? InboxID(validating: authenticated.inboxID)
    }

    // MARK: Requests

    /// Sends a frame and waits for the reply with the same request id. An
    /// error frame becomes `.refused`.
    public func request(
        _ frame: WireClientFrame, timeout: Duration = defaultTimeout
    ) async throws(RelayClientError)
        -> WireServerFrame
    {
        try await request(frame, id: newRequestID(), timeout: timeout)
    }

    private func newRequestID() -> UInt64 {
        defer { nextRequestID += 1 }
        return nextRequestID
    }

    /// A request on its way or waiting for its reply. The reply (or a
    /// failure) may come while the request is still being written, before
    /// its caller waits: it is kept until then.
    private struct PendingRequest {
        let deadline: ContinuousClock.Instant
        var waiter: CheckedContinuation<WireServerFrame, any Error>?
        var outcome: Result<WireServerFrame, RelayClientError>?
    }

    /// Sends a request and waits for its reply on the caller's task: no
    /// task or timer of its own (a publish is the hot path of every app).
    private func request(
        _ frame: WireClientFrame, id requestID: UInt64, timeout: Duration
    ) async throws(RelayClientError) -> WireServerFrame {
        if let closedError { throw closedError }
        guard let writer else { throw .disconnected("not connected") }
        var frame = frame
        frame.requestID = requestID
        let deadline = ContinuousClock.now + timeout
        pending[requestID] = PendingRequest(deadline: deadline)
        armTimeoutSweep(for: deadline)
        do {
            try await writer.write(.binary(ByteBuffer(bytes: FrameCodec.encode(frame))))
        } catch {
            // A caller that gave up while its request waited to be written
            // gets what giving up while waiting for the reply gives.
            let failure: RelayClientError =
                Task.isCancelled ? .timedOut("reply to request \(requestID)") : .disconnected("write failed: \(error)")
            meet(requestID, outcome: .failure(failure))
        }
        let reply: WireServerFrame
        do {
            reply = try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in
                    wait(for: requestID, continuation)
                }
            } onCancel: {
                Task { await self.meet(requestID, outcome: .failure(.timedOut("reply to request \(requestID)"))) }
            }
        } catch let error as RelayClientError {
            throw error
        } catch {
            throw .disconnected("\(error)")
        }
        if case .error(let error)? = reply.body {
            throw RelayClientError(error)
        }
        return reply
    }

    private func wait(for requestID: UInt64, _ continuation: CheckedContinuation<WireServerFrame, any Error>) {
        guard pending[requestID] != nil else {
            // Only a closing connection drops a request unanswered.
            continuation.resume(throwing: closedError ?? .disconnected("the connection closed"))
            return
        }
        meet(requestID, waiter: continuation)
    }

    /// The caller's wait and the request's outcome meet here, in either
    /// order; the second to come completes the request. The first outcome
    /// counts: a late one (a reply after a timeout) is dropped.
    private func meet(
        _ requestID: UInt64, waiter: CheckedContinuation<WireServerFrame, any Error>? = nil,
        outcome: Result<WireServerFrame, RelayClientError>? = nil
    ) {
        guard var request = pending[requestID] else { return }
        if let waiter { request.waiter = waiter }
        if request.outcome == nil { request.outcome = outcome }
        if let waiter = request.waiter, let outcome = request.outcome {
            pending[requestID] = nil
            waiter.resume(with: outcome.mapError { $0 as any Error })
        } else {
            pending[requestID] = request
        }
    }

    private func armTimeoutSweep(for deadline: ContinuousClock.Instant) {
        if let sweep = timeoutSweep, sweep.wakesAt <= deadline { return }
        timeoutSweep?.task.cancel()
        let task = Task { [weak self] in
            do { try await Task.sleep(until: deadline, clock: .continuous) } catch { return }
            await self?.sweepTimeouts(woken: deadline)
        }
        timeoutSweep = (task, deadline)
    }

    /// Fails the requests past their deadline and sleeps until the next.
    private func sweepTimeouts(woken: ContinuousClock.Instant) {
        // A sweep replaced by an earlier one may still wake: only the
        // current one sweeps.
        guard timeoutSweep?.wakesAt == woken else { return }
        timeoutSweep = nil
        let now = ContinuousClock.now
        var next: ContinuousClock.Instant?
        for (requestID, request) in pending where request.outcome == nil {
            if request.deadline <= now {
                meet(requestID, outcome: .failure(.timedOut("reply to request \(requestID)")))
            } else {
                next = min(next ?? request.deadline, request.deadline)
            }
        }
        if let next { armTimeoutSweep(for: next) }
    }

    /// Sends raw bytes as one frame, bypassing encoding. For tests of the
    /// relay's handling of hostile input.
    public func sendRaw(_ bytes: Data) async throws(RelayClientError) {
        guard let writer else { throw .disconnected("not connected") }
        do {
            try await writer.write(.binary(ByteBuffer(bytes: bytes)))
        } catch {
            throw .disconnected("write failed: \(error)")
        }
    }

    /// Publishes to a topic. Every topic but an inbox needs `access` (its
    /// current access key; the proof is made for this connection). A
    /// control entry (a group commit) names the seq of the last control
    /// entry its author has read (`expectedControlSeq`, 0: none) and may
    /// rotate the topic's access key (`rotateAccessKey`: the new key's
    /// public key, 32 bytes). Throws `.conflict`, `.accessRevoked`,
    /// `.quotaExceeded`, `.rateLimited` or `.refused`.
    public func publish(
        topic: TopicName, payload: Data, idempotencyKey: Data, shouldPush: Bool = false, expiresAt: Date? = nil,
        access: TopicAccess? = nil, control: Bool = false, expectedControlSeq: UInt64 = 0,
        rotateAccessKey: Data? = nil
    ) async throws(RelayClientError) -> WirePublishAck {
        var publish = WirePublish(
            topic: topic, payload: payload, idempotencyKey: idempotencyKey, shouldPush: shouldPush,
            expiresAt: expiresAt, control: control, expectedControlSeq: expectedControlSeq,
            rotateAccessKey: rotateAccessKey)
        if let proof = proof(access, topic: topic) { publish.proof = proof }
        var frame = WireClientFrame()
        frame.publish = publish
        let reply = try await request(frame)
        guard case .publishAck(let ack)? = reply.body else {
            throw .protocolViolation("expected publish_ack")
        }
        return ack
    }

    public func putKeyBundle(_ bundle: WireSignedKeyBundle) async throws(RelayClientError) {
        var frame = WireClientFrame()
        frame.putKeyBundle.bundle = bundle
        _ = try await request(frame)
    }

    /// Looks up an inbox's key bundle. Returns nil when the relay has none.
    /// The caller verifies it: the relay is not trusted.
    public func keyBundle(for inbox: InboxID) async throws(RelayClientError) -> WireSignedKeyBundle? {
        var frame = WireClientFrame()
        frame.getKeyBundle.inboxID = inbox.rawValue
        let reply: WireServerFrame
        do {
            reply = try await request(frame)
        } catch .refused(code: .notFound, message: _) {
            return nil
        }
        guard case .keyBundle(let result)? = reply.body else { throw .protocolViolation("expected key_bundle") }
        return result.bundle
    }

    public func ping() async throws(RelayClientError) {
        var frame = WireClientFrame()
        frame.ping.nonce = UInt64.random(in: 1 ... .max)
        _ = try await request(frame)
    }

    // MARK: Subscriptions

    /// Subscribes to a topic from a cursor: the stream yields the backlog,
    /// then `.caughtUp`, then live envelopes. It ends with an error when the
    /// relay refuses or the connection drops. Every topic but an inbox
    /// needs `access`: any key of the topic's chain; a retired key reads up
    /// to its last seq, then the stream ends with `.accessRevoked`.
    public func subscribe(
        topic: TopicName, after cursor: UInt64, access: TopicAccess? = nil
    ) -> AsyncThrowingStream<SubscriptionEvent, any Error> {
        let (stream, continuation) = AsyncThrowingStream<SubscriptionEvent, any Error>.makeStream()
        if let closedError {
            continuation.finish(throwing: closedError)
            return stream
        }
        subscriptions[topic.rawValue]?.finish()
        subscriptions[topic.rawValue] = continuation
        var frame = WireClientFrame()
        frame.subscribe.topic = topic.rawValue
        frame.subscribe.afterSeq = cursor
        if let proof = proof(access, topic: topic) { frame.subscribe.proof = proof }
        let requestID = newRequestID()
        subscribeReplies[requestID] = continuation
        Task {
            do {
                _ = try await self.request(frame, id: requestID, timeout: .seconds(120))
            } catch {
                self.subscribeReplies[requestID] = nil
                self.endSubscription(
                    topic.rawValue, continuation: continuation,
                    error: error as? RelayClientError ?? .disconnected("\(error)"))
            }
        }
        return stream
    }

    public func unsubscribe(topic: TopicName) async {
        subscriptions.removeValue(forKey: topic.rawValue)?.finish()
        var frame = WireClientFrame()
        frame.unsubscribe.topic = topic.rawValue
        _ = try? await request(frame)
    }

    private func endSubscription(
        _ topic: String, continuation: AsyncThrowingStream<SubscriptionEvent, any Error>.Continuation,
        error: RelayClientError
    ) {
        continuation.finish(throwing: error)
        subscriptions[topic] = nil
    }

    // MARK: Inbound

    private func receive(_ bytes: Data) {
        let frame: WireServerFrame
        do {
            frame = try FrameCodec.decodeServerFrame(bytes)
        } catch {
            logger.warning("dropping undecodable frame from relay: \(error)")
            return
        }
        switch frame.body {
        case .challenge(let challenge)?:
            self.challenge = challenge
            challengeWaiter?.resume(returning: challenge)
            challengeWaiter = nil
        case .envelope(let envelope)?:
            subscriptions[envelope.topic]?.yield(.envelope(envelope))
        case .error(let error)? where frame.requestID == 0:
            // A pushed error: ends a subscription (slow consumer) or warns
            // that the connection is about to close.
            if !error.topic.isEmpty, let continuation = subscriptions.removeValue(forKey: error.topic) {
                continuation.finish(throwing: RelayClientError(error))
            } else if error.code == .shuttingDown {
                // The relay is going away: end every subscription now so
                // followers reconnect (jittered) instead of waiting for the
                // socket to close.
                logger.debug("the relay is shutting down")
                closed(RelayClientError(error))
                Task { await self.close() }
            } else {
                logger.warning("relay error: \(error.code.name): \(error.message)")
                closedError = RelayClientError(error)
            }
        default:
            if case .subscribed(let subscribed)? = frame.body,
                let subscription = subscribeReplies.removeValue(forKey: frame.requestID)
            {
                // Yielded as the reply arrives, not when its request's task
                // resumes: a live envelope right behind it on the socket
                // must come after `.caughtUp`.
                subscription.yield(.caughtUp(seq: subscribed.caughtUpSeq))
            }
            meet(frame.requestID, outcome: .success(frame))
        }
    }

    private func closed(_ error: RelayClientError) {
        if closedError == nil { closedError = error }
        let reason = closedError ?? error
        writer = nil
        challengeWaiter?.resume(throwing: reason)
        challengeWaiter = nil
        let unanswered = pending
        pending.removeAll()
        for request in unanswered.values { request.waiter?.resume(throwing: reason) }
        timeoutSweep?.task.cancel()
        timeoutSweep = nil
        for continuation in subscriptions.values { continuation.finish(throwing: reason) }
        subscriptions.removeAll()
        subscribeReplies.removeAll()
        keepAliveTask?.cancel()
    }

    public var isOpen: Bool { closedError == nil && writer != nil }

    /// Closes the connection; pending requests fail with `.disconnected`.
    public func close() async {
        if let writer {
            try? await writer.close(.normalClosure, reason: nil)
        }
        closed(.disconnected("closed by the client"))
        runTask?.cancel()
    }
}

/// Runs `operation` and fails with `.timedOut` if it takes longer than
/// `timeout`.
func withTimeout<T: Sendable>(
    _ timeout: Duration, what: String, _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await operation() }
        group.addTask {
            try await Task.sleep(for: timeout)
            throw RelayClientError.timedOut(what)
        }
        defer { group.cancelAll() }
        guard let result = try await group.next() else { throw RelayClientError.timedOut(what) }
        return result
    }
}

extension WirePublish {
    /// A publish frame as both transports send it (the WebSocket adds its
    /// proof to the frame, HTTP sends it in a header).
    init(
        topic: TopicName, payload: Data, idempotencyKey: Data, shouldPush: Bool, expiresAt: Date?, control: Bool,
        expectedControlSeq: UInt64, rotateAccessKey: Data?
    ) {
        self.init()
        self.topic = topic.rawValue
        self.payload = payload
        self.idempotencyKey = idempotencyKey
        self.shouldPush = shouldPush
        if let expiresAt { expiresAtMs = Int64(expiresAt.timeIntervalSince1970 * 1000) }
        self.control = control
        self.expectedControlSeq = expectedControlSeq
        if let rotateAccessKey { self.rotateAccessKey = rotateAccessKey }
    }
}
