import Foundation
import Logging
import NIOCore
import RallyCrypto
import RallyWire
import Synchronization

/// What the transport should do after the session handled something.
enum SessionDisposition: Sendable, Equatable {
    case keepOpen
    /// A fatal error frame was sent; close the connection.
    case close
}

/// The protocol logic of one WebSocket connection, free of sockets: it
/// takes received bytes and emits frames through `send`. The WebSocket
/// handler is a thin shell around it; tests drive it directly.
///
/// Frames are emitted on three paths, each in order: replies to requests
/// (from `receive`), publish acks (through `pumpAcks`, in commit order) and,
/// per subscription, its backlog, `Subscribed` and live envelopes.
actor RelaySession {
    typealias Send = @Sendable (WireServerFrame) async throws -> Void
    /// Sends a frame that is already encoded as a WebSocket frame (a live
    /// envelope the hub encoded once for all its subscribers).
    typealias SendEncoded = @Sendable (ByteBuffer) async throws -> Void

    private struct ActiveSubscription {
        let generation: UInt64
        let task: Task<Void, Never>
    }

    let services: RelayServices
    nonisolated let challengeNonce: Data
    /// The client's IP address: the key of the per-IP limits.
    nonisolated let remoteIP: String
    /// What a publish's checks read and change, under a lock: a publish
    /// is also checked on the socket's event loop, outside this actor
    /// (ADR 0028).
    private struct PublishGate {
        /// The authenticated inbox, once there is one (it never changes).
        var inboxID: InboxID?
        var bucket: TokenBucket
        /// Topic proofs verified on this connection; publishes are the hot
        /// path, so a proof's signature is checked once per topic and key.
        var verifiedProofs: Set<VerifiedTopic> = []
        /// The topic and key a proof verified last, with the topic's
        /// validated name: a publisher sends to one topic after another,
        /// and comparing the name and key costs less than validating the
        /// name again and hashing it.
        var lastVerified: VerifiedTopic?
        /// The address's and identity's publish limits, looked up by the
        /// first publish (again after authentication).
        var rateBuckets: PublishRateBuckets?

        /// Whether a proof of `verified` checked out on this connection
        /// before; if so it becomes the last verified.
        mutating func hasVerified(_ verified: VerifiedTopic) -> Bool {
            guard verifiedProofs.contains(verified) else { return false }
            lastVerified = verified
            return true
        }

        mutating func noteVerified(_ verified: VerifiedTopic, keeping limit: Int) {
            if verifiedProofs.count >= limit { verifiedProofs.removeAll() }
            verifiedProofs.insert(verified)
            lastVerified = verified
        }

        /// The last verified topic, if `publish` names it with its key: a
        /// name equal to one validated before is valid, and its proof's key
        /// is one this connection verified for it.
        func lastVerified(matching publish: WirePublish) -> VerifiedTopic? {
            guard let lastVerified, publish.hasProof,
                lastVerified.matches(publish.topic, publish.proof.accessKey)
            else { return nil }
            return lastVerified
        }
    }

    /// A topic and the access key whose proof verified for it. Equal and
    /// hashed by the name and the key: a name's kind follows from it.
    private struct VerifiedTopic: Hashable {
        let topic: TopicName
        let accessKey: Data

        func matches(_ topicName: String, _ key: Data) -> Bool {
            topicName == topic.rawValue && key == accessKey
        }

        static func == (a: Self, b: Self) -> Bool { a.matches(b.topic.rawValue, b.accessKey) }

        func hash(into hasher: inout Hasher) {
            hasher.combine(topic.rawValue)
            hasher.combine(accessKey)
        }
    }

    private nonisolated let gate: Mutex<PublishGate>
    /// When the client last sent something, on the relay's clock, in
    /// nanoseconds: the relay's deadline sweeper reads it for every
    /// connection without waiting for each actor.
    nonisolated let lastActivityNanoseconds: Atomic<Int64>
    /// Set once the client authenticated (read by the sweeper too).
    nonisolated let isAuthenticated = Atomic<Bool>(false)
    private let send: Send
    private let sendEncoded: SendEncoded
    private let writeLive: LiveDelivery.Write?
    private let acks: AsyncStream<WireServerFrame>
    private let ackContinuation: AsyncStream<WireServerFrame>.Continuation
    /// The authenticated inbox, once there is one: kept in the gate, which
    /// the loop's publishes read too.
    nonisolated var inboxID: InboxID? { gate.withLock { $0.inboxID } }
    private var subscriptions: [String: ActiveSubscription] = [:]
    private var nextGeneration: UInt64 = 1
    private var isClosed = false
    /// A deadline ended the connection; the transport is closing it.
    private var isEnding = false
    /// The SHUTTING_DOWN notice went out (once per connection).
    private var toldShuttingDown = false

    /// Without `sendEncoded` (tests that read frames), encoded frames are
    /// decoded again and go through `send`. Without `writeLive`, every live
    /// envelope goes through its subscription's feed.
    init(
        services: RelayServices, remoteIP: String = "local", send: @escaping Send,
        sendEncoded: SendEncoded? = nil, writeLive: LiveDelivery.Write? = nil
    ) {
        self.writeLive = writeLive
        self.services = services
        self.remoteIP = remoteIP
        lastActivityNanoseconds = Atomic(services.clock.monotonic.nanoseconds)
        self.send = send
        self.sendEncoded =
            sendEncoded ?? { buffer in
                try await send(FrameCodec.decodeServerFrame(Data(buffer.webSocketServerMessage.readableBytesView)))
            }
        var nonce = Data(count: 32)
        var generator = SystemRandomNumberGenerator()
        for index in nonce.indices { nonce[index] = UInt8.random(in: .min ... .max, using: &generator) }
        self.challengeNonce = nonce
        (acks, ackContinuation) = AsyncStream.makeStream(of: WireServerFrame.self)
        gate = Mutex(
            PublishGate(
                bucket: TokenBucket(
                    ratePerSecond: services.limits.publishRatePerSecond, burst: services.limits.publishBurst,
                    now: services.clock.monotonic)))
    }

    /// The first frame of every connection.
    nonisolated var challengeFrame: WireServerFrame {
        var challenge = WireChallenge()
        challenge.nonce = challengeNonce
        challenge.serverTimeMs = services.clock.nowMilliseconds
        challenge.protocolVersion = WireLimits.protocolVersion
        challenge.maxPayloadBytes = UInt32(WireLimits.maxPayloadBytes)
        challenge.authTimeoutMs = services.limits.authTimeoutMilliseconds
        var frame = WireServerFrame()
        frame.challenge = challenge
        return frame
    }

    /// Sends publish acks as their commits complete; returns when the
    /// session is closed.
    nonisolated func pumpAcks() async {
        for await frame in acks {
            do { try await send(frame) } catch { return }
        }
    }

    /// One binary WebSocket message.
    func receive(_ bytes: Data) async -> SessionDisposition {
        noteActivity()
        let frame: WireClientFrame
        do throws(FrameDecodingError) {
            frame = try FrameCodec.decodeClientFrame(bytes)
        } catch {
            switch error {
            case .tooLarge: return await reply(RelayFailure(.frameTooLarge, error.description), to: 0)
            case .empty, .malformed: return await reply(RelayFailure(.malformedFrame, error.description), to: 0)
            }
        }
        return await handle(frame)
    }

    /// One binary WebSocket message the transport has decoded already.
    func receive(_ frame: WireClientFrame) async -> SessionDisposition {
        noteActivity()
        return await handle(frame)
    }

    /// A message the protocol does not allow (a text message).
    func reject(_ failure: RelayFailure) async -> SessionDisposition {
        noteActivity()
        return await reply(failure, to: 0)
    }

    /// Called by the transport now and then: closes a connection the client
    /// has sent nothing on for `idleTimeout` (by the relay's clock).
    func idleCheck() async -> SessionDisposition {
        guard !isClosed, !isEnding, isIdle(at: services.clock.monotonic) else { return .keepOpen }
        return await reply(RelayFailure(.idleTimeout, "the connection was idle for too long"), to: 0)
    }

    /// Whether the client has sent nothing for `idleTimeout` at `now` (the
    /// relay's clock); callable from anywhere, without a hop.
    nonisolated func isIdle(at now: Duration) -> Bool {
        now.nanoseconds - lastActivityNanoseconds.load(ordering: .relaxed) >= services.limits.idleTimeout.nanoseconds
    }

    private nonisolated func noteActivity() { noteActivity(at: services.clock.monotonic) }

    private nonisolated func noteActivity(at now: Duration) {
        lastActivityNanoseconds.store(now.nanoseconds, ordering: .relaxed)
    }

    /// Ends the connection from outside the transport (a deadline): the
    /// ack stream finishes, and with it the transport's ack pump, which
    /// closes the WebSocket after what is queued was written.
    func endConnection() {
        isEnding = true
        ackContinuation.finish()
    }

    /// Called by the transport when the authentication deadline passes.
    func authTimeoutElapsed() async -> SessionDisposition {
        guard inboxID == nil, !isClosed, !isEnding else { return .keepOpen }
        return await reply(RelayFailure(.authenticationTimeout, "no authentication within the time limit"), to: 0)
    }

    /// Tells the client the relay is going away.
    func shuttingDown() async {
        guard !isClosed, !toldShuttingDown else { return }
        toldShuttingDown = true
        _ = await reply(RelayFailure(.shuttingDown, "the relay is shutting down"), to: 0)
    }

    /// Ends every subscription and the ack stream.
    func close() async {
        isClosed = true
        let active = subscriptions.values.map(\.task)
        subscriptions.removeAll()
        for task in active { task.cancel() }
        for task in active { await task.value }
        ackContinuation.finish()
    }

    func handle(_ frame: WireClientFrame) async -> SessionDisposition {
        let requestID = frame.requestID
        do throws(RelayFailure) {
            switch frame.body {
            case .authenticate(let auth): try await authenticate(auth, requestID: requestID)
            case .publish(let publish): try self.publish(publish, requestID: requestID)
            case .subscribe(let subscribe): try await self.subscribe(subscribe, requestID: requestID)
            case .unsubscribe(let unsubscribe): try await self.unsubscribe(unsubscribe, requestID: requestID)
            case .ping(let ping): try await pong(ping, requestID: requestID)
            case .putKeyBundle(let put):
                var result = WireKeyBundleResult()
                result.bundle = try await services.putKeyBundle(put.bundle)
                try await emit(requestID) { $0.keyBundle = result }
            case .getKeyBundle(let get):
                var result = WireKeyBundleResult()
                result.bundle = try await services.keyBundle(inboxID: get.inboxID)
                try await emit(requestID) { $0.keyBundle = result }
            case nil:
                // A frame kind from a newer client, or none at all.
                throw RelayFailure(.invalidRequest, "unsupported or empty frame")
            }
        } catch {
            return await reply(error, to: requestID)
        }
        return .keepOpen
    }

    private func authenticate(_ auth: WireAuthenticate, requestID: UInt64) async throws(RelayFailure) {
        let verified: InboxID
        do {
            verified = try RelayAuthentication.verify(
                auth, challengeNonce: challengeNonce, origins: services.origins.current)
        } catch {
            throw RelayFailure(.authenticationFailed, error.description)
        }
        if let inboxID, inboxID != verified {
            throw RelayFailure(.invalidRequest, "this connection is already authenticated as another inbox")
        }
        gate.withLock { gate in
            gate.inboxID = verified
            gate.rateBuckets = nil
        }
        isAuthenticated.store(true, ordering: .relaxed)
        var authenticated = WireAuthenticated()
        authenticated.inboxID = verified.rawValue
        try await emit(requestID) { $0.authenticated = authenticated }
    }

    /// Checks a proof for `topic` on this connection: the signature over
    /// the relay's origin, the challenge nonce and the topic. Returns the
    /// access key (the caller checks it against the topic's chain).
    private nonisolated func verifiedAccessKey(
        _ proof: WireTopicProof?, topic: TopicName
    ) throws(RelayFailure) -> Data? {
        guard topic.kind != .inbox else { return nil }
        guard let proof, !proof.accessKey.isEmpty else {
            throw RelayFailure(.forbidden, "this topic needs a topic proof", topic: topic.rawValue)
        }
        let verified = VerifiedTopic(topic: topic, accessKey: proof.accessKey)
        if gate.withLock({ $0.hasVerified(verified) }) { return proof.accessKey }
        let valid = services.origins.current.contains { origin in
            TopicAccess.isValid(
                proof,
                over: TopicAccess.connectionProofBytes(
                    origin: origin, challengeNonce: challengeNonce, topic: topic.rawValue))
        }
        guard valid else {
            throw RelayFailure(.forbidden, "the topic proof does not verify on this connection", topic: topic.rawValue)
        }
        gate.withLock { $0.noteVerified(verified, keeping: 4 * services.limits.maxSubscriptionsPerConnection) }
        return proof.accessKey
    }

    private func publish(_ publish: WirePublish, requestID: UInt64) throws(RelayFailure) {
        let acks = ackContinuation
        try submit(publish, requestID: requestID, on: nil, now: services.clock.monotonic) { acks.yield($0.frame) }
    }

    /// A publish the socket's event loop takes itself, while nothing else
    /// of this connection waits for the actor (ADR 0028): checked and
    /// queued on `loop`, answered through `answer` once committed. Returns
    /// the refusal to send instead when a check fails.
    nonisolated func publishOnLoop(
        _ publish: WirePublish, requestID: UInt64, loop: any EventLoop,
        answer: @escaping @Sendable (PublishAnswer) -> Void
    ) -> RelayFailure? {
        // One reading of the clock for the activity and the rate limits.
        let now = services.clock.monotonic
        noteActivity(at: now)
        do throws(RelayFailure) {
            try submit(publish, requestID: requestID, on: loop, now: now, answer: answer)
            return nil
        } catch {
            return error
        }
    }

    /// The checks of a publish, in order, then the writer; `answer` gets
    /// the ack or the writer's refusal.
    private nonisolated func submit(
        _ publish: WirePublish, requestID: UInt64, on loop: (any EventLoop)?, now: Duration,
        answer: @escaping @Sendable (PublishAnswer) -> Void
    ) throws(RelayFailure) {
        let topic: TopicName
        let accessKey: Data?
        if let verified = gate.withLock({ $0.lastVerified(matching: publish) }) {
            (topic, accessKey) = (verified.topic, verified.accessKey)
        } else {
            topic = try services.validateTopic(publish.topic, forCapability: true)
            accessKey = try verifiedAccessKey(publish.hasProof ? publish.proof : nil, topic: topic)
        }
        let request = try services.validatePublish(publish, to: topic, accessKey: accessKey)
        let (taken, identity, cached) = gate.withLock { ($0.bucket.take(now: now), $0.inboxID, $0.rateBuckets) }
        if case .limited(let retryAfter) = taken {
            throw RelayFailure(
                .rateLimited, "too many publishes on this connection", topic: request.topic,
                retryAfterMilliseconds: retryAfter)
        }
        try services.checkPublishRate(cached ?? rateBuckets(identity: identity), topic: request.topic, now: now)
        let services = services
        // The topic alone: a closure holding the request would copy every
        // field of it once more per publish.
        let topicName = request.topic
        services.writer.submit(request, on: loop) { result in
            switch result {
            case .success(let appended):
                answer(.stored(appended, requestID: requestID))
            case .failure(var failure):
                failure.topic = topicName
                answer(.refused(services.errorFrame(failure, requestID: requestID)))
            }
        }
    }

    /// Looks the connection's publish limits up and keeps them, unless
    /// authentication changed the identity meanwhile.
    private nonisolated func rateBuckets(identity: InboxID?) -> PublishRateBuckets {
        let buckets = services.publishRateBuckets(ip: remoteIP, identity: identity)
        gate.withLock { gate in
            if gate.inboxID == identity { gate.rateBuckets = buckets }
        }
        return buckets
    }

    private func subscribe(_ subscribe: WireSubscribe, requestID: UInt64) async throws(RelayFailure) {
        guard let inboxID else { throw RelayFailure(.notAuthenticated, "authenticate before subscribing") }
        let topic = try services.validateTopic(subscribe.topic, forCapability: true)
        if topic.kind == .inbox, topic.id != inboxID.rawValue {
            throw RelayFailure(.forbidden, "only its owner may read an inbox", topic: topic.rawValue)
        }
        let accessKey = try verifiedAccessKey(subscribe.hasProof ? subscribe.proof : nil, topic: topic)
        var bound: UInt64?
        if let accessKey { bound = try await services.readBound(topic: topic, key: accessKey) }
        if let existing = subscriptions.removeValue(forKey: topic.rawValue) {
            // A repeated subscribe restarts from the new cursor.
            existing.task.cancel()
            await existing.task.value
        } else if subscriptions.count >= services.limits.maxSubscriptionsPerConnection {
            throw RelayFailure(
                .tooManySubscriptions,
                "at most \(services.limits.maxSubscriptionsPerConnection) subscriptions per connection",
                topic: topic.rawValue)
        }
        guard !isClosed else { return }
        let generation = nextGeneration
        nextGeneration += 1
        let feed = SubscriptionFeed(
            topic: topic.rawValue, requestID: requestID, cursor: subscribe.afterSeq, services: services, send: send,
            sendEncoded: sendEncoded, accessKey: accessKey, readBound: bound, writeLive: writeLive)
        let task = Task {
            _ = await feed.run()
            self.subscriptionEnded(topic: topic.rawValue, generation: generation)
        }
        subscriptions[topic.rawValue] = ActiveSubscription(generation: generation, task: task)
    }

    /// Forgets a subscription that ended on its own (slow consumer, store
    /// failure, shutdown), unless the topic was resubscribed meanwhile.
    private func subscriptionEnded(topic: String, generation: UInt64) {
        if subscriptions[topic]?.generation == generation { subscriptions[topic] = nil }
    }

    private func unsubscribe(_ unsubscribe: WireUnsubscribe, requestID: UInt64) async throws(RelayFailure) {
        if let existing = subscriptions.removeValue(forKey: unsubscribe.topic) {
            existing.task.cancel()
            // Nothing of the topic is sent after `Unsubscribed`.
            await existing.task.value
        }
        var unsubscribed = WireUnsubscribed()
        unsubscribed.topic = unsubscribe.topic
        try await emit(requestID) { $0.unsubscribed = unsubscribed }
    }

    private func pong(_ ping: WirePing, requestID: UInt64) async throws(RelayFailure) {
        var pong = WirePong()
        pong.nonce = ping.nonce
        pong.serverTimeMs = services.clock.nowMilliseconds
        try await emit(requestID) { $0.pong = pong }
    }

    var subscribedTopics: Set<String> { Set(subscriptions.keys) }

    // A failed write means the connection is gone; the transport notices
    // on its own, so the error is dropped here.
    private func emit(_ requestID: UInt64, _ fill: (inout WireServerFrame) -> Void) async throws(RelayFailure) {
        var frame = WireServerFrame()
        frame.requestID = requestID
        fill(&frame)
        try? await send(frame)
    }

    private func reply(_ failure: RelayFailure, to requestID: UInt64) async -> SessionDisposition {
        try? await send(services.errorFrame(failure, requestID: requestID))
        return failure.isFatal ? .close : .keepOpen
    }
}

/// What a publish is answered with once the writer is done with it.
enum PublishAnswer: Sendable {
    case stored(AppendResult, requestID: UInt64)
    case refused(WireServerFrame)

    var frame: WireServerFrame {
        switch self {
        case .stored(let appended, let requestID):
            var frame = WireServerFrame()
            frame.requestID = requestID
            frame.publishAck = appended.ack
            return frame
        case .refused(let frame):
            return frame
        }
    }

    /// The frame as the socket writes it, a WebSocket frame; an ack encoded
    /// by hand (``HotFrameEncoding``).
    var encoded: ByteBuffer {
        switch self {
        case .stored(let appended, let requestID):
            HotFrameEncoding.publishAck(
                requestID: requestID, topic: appended.envelope.topic, seq: appended.envelope.seq,
                serverTimeMs: appended.envelope.serverTimeMs, duplicate: appended.duplicate)
        case .refused(let frame):
            .webSocketServerFrame(encoding: frame)
        }
    }
}
