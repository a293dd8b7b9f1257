public import Foundation
public import RallyCrypto
public import RallyWire

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The HTTP fallback transport, for networks that block WebSockets: every
/// operation is a plain request to the relay's HTTP API (`POST /v1/publish`,
/// `GET /v1/topics/<kind>/<id>`, `PUT /v1/keys`, `GET /v1/keys/<inbox>`),
/// and a subscription is a loop of long polls. Same semantics and errors as
/// ``WebSocketTransport``.
public struct HTTPTransport: RelayTransport {
    public let relayURL: URL
    /// How long one long poll of a subscription waits for new envelopes
    /// (the relay clamps it to its own maximum, 30 s by default).
    public var longPollWait: Duration
    /// The deadline of a request that does not long-poll, and the grace a
    /// long poll gets on top of its wait.
    public var requestTimeout: Duration

    public init(
        relayURL: URL, longPollWait: Duration = .seconds(20),
        requestTimeout: Duration = HTTPRelayLink.defaultRequestTimeout
    ) {
        self.relayURL = relayURL
        self.longPollWait = longPollWait
        self.requestTimeout = requestTimeout
    }

    /// Opens a link and checks `GET /healthz`, so an unreachable relay fails
    /// here with ``RelayClientError/unreachable(url:reason:)``.
    public func connect(as identity: Identity) async throws(RelayClientError) -> any RelayLink {
        try await HTTPRelayLink.connect(
            to: relayURL, identity: identity, longPollWait: longPollWait, requestTimeout: requestTimeout)
    }
}

/// One client's use of a relay's HTTP API: one ephemeral `URLSession`,
/// requests signed per request (a fresh nonce each: the relay refuses
/// replays), and a long-poll task per subscribed topic.
///
/// Every request carries an explicit deadline (``requestTimeout``, or the
/// long poll's wait plus it) and a bound on the answer's
/// size (``maxResponseBytes``, ``maxFetchResponseBytes``): a larger body is
/// refused while it streams in, never buffered whole.
public actor HTTPRelayLink: RelayLink {
    /// Deadline of a request that does not long-poll, and the grace a long
    /// poll gets on top of its wait, unless the transport sets another.
    public static let defaultRequestTimeout: Duration = .seconds(15)
    /// Envelopes one fetch asks for.
    public static let fetchPageLimit = 100
    /// Largest fetch answer accepted: the relay's default page (1 MiB of
    /// payload past its first envelope, which is at most
    /// `WireLimits.maxPayloadBytes`) plus per-envelope fields for
    /// ``fetchPageLimit`` envelopes, with room to spare. A relay configured
    /// with larger pages is read one envelope per request instead (an
    /// answer then fits ``maxResponseBytes``).
    public static let maxFetchResponseBytes = 4 << 20
    /// Largest answer to any other request (and to a one-envelope fetch):
    /// one frame, as on the WebSocket.
    public static let maxResponseBytes = WireLimits.maxFrameBytes
    /// A live long poll that comes back empty sooner than this (a relay
    /// that is shutting down or does not wait) is followed by a pause, so a
    /// subscription never spins.
    public static let minimumEmptyPollInterval: Duration = .seconds(1)
    /// Requests at once to the relay: each subscription holds one for its
    /// long poll.
    public static let maxConnectionsPerHost = 64

    public nonisolated let relayURL: URL
    /// The relay's origin as signatures bind it (`RelayOrigin`).
    public nonisolated let origin: String
    /// How long a subscription's long poll waits.
    public nonisolated let longPollWait: Duration
    /// The deadline of a request that does not long-poll, and the grace a
    /// long poll gets on top of its wait.
    public nonisolated let requestTimeout: Duration
    /// The inbox this link reads (its identity's).
    public nonisolated let inboxID: InboxID
    private nonisolated let identity: Identity
    private nonisolated let endpoint: HTTPRelayEndpoint
    private nonisolated let exchange: HTTPExchange

    private struct Subscription {
        var id: UInt64
        var task: Task<Void, Never>
        var continuation: AsyncThrowingStream<RelaySubscriptionEvent, any Error>.Continuation
    }
    private var subscriptions: [String: Subscription] = [:]
    private var nextSubscriptionID: UInt64 = 1

    private init(endpoint: HTTPRelayEndpoint, identity: Identity, longPollWait: Duration, requestTimeout: Duration) {
        self.relayURL = endpoint.relayURL
        self.origin = endpoint.origin
        self.endpoint = endpoint
        self.identity = identity
        self.inboxID = identity.inboxID
        self.longPollWait = max(.zero, longPollWait)
        self.requestTimeout = max(.milliseconds(1), requestTimeout)
        self.exchange = HTTPExchange(maxConnectionsPerHost: Self.maxConnectionsPerHost)
    }

    deinit {
        // The session holds its delegate until it is invalidated.
        exchange.shutDown(.disconnected("the link was released"))
    }

    /// Opens a link to the relay at `relayURL` (http or https; ws and wss
    /// map to them) and checks `GET /healthz`.
    /// - Throws: ``RelayClientError/unreachable(url:reason:)`` when the relay
    ///   does not answer, or its refusal.
    public static func connect(
        to relayURL: URL, identity: Identity, longPollWait: Duration = .seconds(20),
        requestTimeout: Duration = defaultRequestTimeout
    ) async throws(RelayClientError) -> HTTPRelayLink {
        guard let endpoint = HTTPRelayEndpoint(relayURL) else {
            throw .unreachable(url: relayURL.absoluteString, reason: "not an http or https URL")
        }
        let link = HTTPRelayLink(
            endpoint: endpoint, identity: identity, longPollWait: longPollWait, requestTimeout: requestTimeout)
        do {
            try await link.ping()
        } catch {
            await link.close()
            switch error {
            case .unreachable, .refused, .conflict, .accessRevoked, .quotaExceeded, .rateLimited: throw error
            case .disconnected(let reason), .timedOut(let reason), .protocolViolation(let reason):
                throw .unreachable(url: relayURL.absoluteString, reason: reason)
            }
        }
        return link
    }

    /// Runs `body` over a link of its own, closed afterwards whatever
    /// happens (blobs and escrows are served over HTTP only).
    static func using<T>(
        _ relayURL: URL, identity: Identity, _ body: (HTTPRelayLink) async throws(RallyClientError) -> T
    ) async throws(RallyClientError) -> T {
        let link: HTTPRelayLink
        do {
            link = try await connect(to: relayURL, identity: identity)
        } catch {
            throw .relay(error)
        }
        do {
            let result = try await body(link)
            await link.close()
            return result
        } catch {
            await link.close()
            throw error
        }
    }

    public var isOpen: Bool { exchange.isOpen }

    // MARK: Requests

    public nonisolated func publish(
        topic: TopicName, payload: Data, idempotencyKey: Data, shouldPush: Bool, expiresAt: Date?,
        access: TopicAccess?, control: Bool, expectedControlSeq: UInt64, rotateAccessKey: Data?
    ) async throws(RelayClientError) -> WirePublishAck {
        let publish = WirePublish(
            topic: topic, payload: payload, idempotencyKey: idempotencyKey, shouldPush: shouldPush,
            expiresAt: expiresAt, control: control, expectedControlSeq: expectedControlSeq,
            rotateAccessKey: rotateAccessKey)
        let body = FrameCodec.encode(publish)
        let reply = try await send(
            "POST", "/v1/publish", body: body, signing: access.map { .topicProof($0) } ?? .unsigned,
            what: "publish to \(topic)")
        return try reply.decode("publish ack") { data throws(FrameDecodingError) in
            try FrameCodec.decode(WirePublishAck.self, from: data, limit: Self.maxResponseBytes)
        }
    }

    public nonisolated func putKeyBundle(_ bundle: WireSignedKeyBundle) async throws(RelayClientError) {
        let reply = try await send(
            "PUT", "/v1/keys", body: FrameCodec.encode(bundle), signing: .unsigned, what: "put key bundle")
        // The relay answers with the bundle it stored.
        _ = try reply.decode("key bundle", empty: WireSignedKeyBundle()) { data throws(FrameDecodingError) in
            try FrameCodec.decode(WireSignedKeyBundle.self, from: data, limit: Self.maxResponseBytes)
        }
    }

    /// An inbox's key bundle as the relay has it (unverified: the caller
    /// verifies it), or nil when the relay has none.
    public nonisolated func keyBundle(for inbox: InboxID) async throws(RelayClientError) -> WireSignedKeyBundle? {
        let reply = try await send(
            "GET", "/v1/keys/" + inbox.rawValue, signing: .unsigned, what: "key bundle of \(inbox.rawValue)")
        do {
            return try reply.decode("key bundle") { data throws(FrameDecodingError) in
                try FrameCodec.decode(WireSignedKeyBundle.self, from: data, limit: Self.maxResponseBytes)
            }
        } catch .refused(code: .notFound, message: _) {
            return nil
        }
    }

    /// `DELETE /v1/topics/<kind>/<id>`: deletes a capability topic proven by
    /// its current access key; the relay keeps only a tombstone. A retry
    /// after a lost answer succeeds.
    public nonisolated func deleteTopic(_ topic: TopicName, access: TopicAccess) async throws(RelayClientError) {
        let reply = try await send(
            "DELETE", "/v1/topics/\(topic.rawValue)", signing: .topicProof(access), what: "delete \(topic.rawValue)")
        guard reply.status == 200 else { throw reply.failure() }
    }

    /// `GET /healthz`.
    public nonisolated func ping() async throws(RelayClientError) {
        let reply = try await send("GET", "/healthz", signing: .unsigned, what: "healthz", limit: 1024)
        guard reply.status == 200 else { throw reply.failure() }
    }

    enum Signing {
        case unsigned
        /// `Authorization` by this link's identity (inbox reads).
        case identity
        /// `Rally-Topic-Proof` by a topic's access key.
        case topicProof(TopicAccess)
    }

    /// Sends one request, signed for this relay with a fresh nonce.
    nonisolated func send(
        _ method: String, _ path: String, query: String = "", body: Data = Data(),
        contentType: String = HTTPRelayReply.protobufContentType, signing: Signing, what: String,
        limit: Int = maxResponseBytes, timeout: Duration? = nil
    ) async throws(RelayClientError) -> HTTPRelayReply {
        let timeout = timeout ?? requestTimeout
        let target = endpoint.target(path: path, query: query)
        var request = URLRequest(url: target.url)
        request.httpMethod = method
        request.cachePolicy = .reloadIgnoringLocalCacheData
        // The exchange's own timer is the deadline; URLSession's is a
        // backstop a second later (on Linux it counts whole seconds, and a
        // value under one fails at once).
        request.timeoutInterval = timeout.timeInterval.rounded(.up) + 1
        request.setValue(HTTPRelayReply.protobufContentType, forHTTPHeaderField: "Accept")
        if method == "POST" || method == "PUT" || method == "PATCH" {
            request.httpBody = body
            request.setValue(contentType, forHTTPHeaderField: "Content-Type")
        }
        func binding() -> HTTPRequestBinding {
            .fresh(origin: origin, method: method, path: target.path, query: query, body: body, now: Date())
        }
        switch signing {
        case .unsigned: break
        case .identity:
            request.setValue(
                HTTPAuthorization.header(identity: identity, binding: binding()), forHTTPHeaderField: "Authorization")
        case .topicProof(let access):
            request.setValue(
                HTTPAuthorization.topicProofHeader(access: access, binding: binding()),
                forHTTPHeaderField: HTTPAuthorization.topicProofHeader)
        }
        return try await exchange.perform(request, limit: limit, deadline: timeout, what: what, url: target.url)
    }

    // MARK: Subscriptions

    /// Subscribes to a topic from a cursor: the stream yields the backlog,
    /// then `.caughtUp`, then live envelopes, each once and in seq order.
    /// It ends with an error when the relay refuses or the link drops; a
    /// retired access key reads up to its last seq, then the stream ends
    /// with `.accessRevoked`. Every topic but an inbox needs `access`.
    public func subscribe(
        topic: TopicName, after cursor: UInt64, access: TopicAccess?
    ) -> AsyncThrowingStream<RelaySubscriptionEvent, any Error> {
        let (stream, continuation) = AsyncThrowingStream<RelaySubscriptionEvent, any Error>.makeStream()
        if let closedError = exchange.closedError {
            continuation.finish(throwing: closedError)
            return stream
        }
        if let previous = subscriptions.removeValue(forKey: topic.rawValue) {
            previous.continuation.finish()
            previous.task.cancel()
        }
        let id = nextSubscriptionID
        nextSubscriptionID += 1
        let task = Task {
            await self.poll(topic: topic, after: cursor, access: access, into: continuation)
            self.subscriptionEnded(topic.rawValue, id: id)
        }
        // A consumer that stops listening ends the polling.
        continuation.onTermination = { _ in task.cancel() }
        subscriptions[topic.rawValue] = Subscription(id: id, task: task, continuation: continuation)
        return stream
    }

    public func unsubscribe(topic: TopicName) async {
        guard let subscription = subscriptions.removeValue(forKey: topic.rawValue) else { return }
        subscription.continuation.finish()
        subscription.task.cancel()
    }

    private func subscriptionEnded(_ topic: String, id: UInt64) {
        if subscriptions[topic]?.id == id { subscriptions[topic] = nil }
    }

    /// Closes the link: subscriptions end and pending requests fail with
    /// `.disconnected`; the session is invalidated.
    public func close() async {
        let reason = RelayClientError.disconnected("closed by the client")
        for subscription in subscriptions.values {
            subscription.continuation.finish(throwing: reason)
            subscription.task.cancel()
        }
        subscriptions.removeAll()
        exchange.shutDown(reason)
    }

    /// What one fetch brought.
    private enum FetchOutcome {
        case page(WireFetchResponse)
        /// The answer exceeded the bound for its page size.
        case oversized
    }

    private nonisolated func fetch(
        _ topic: TopicName, after: UInt64, limit: Int, wait: Duration, access: TopicAccess?
    ) async throws(RelayClientError) -> FetchOutcome {
        let waitSeconds = wait.wholeSecondsRoundedUp
        let query = "after=\(after)&limit=\(limit)&wait=\(waitSeconds)"
        let bound = limit > 1 ? Self.maxFetchResponseBytes : Self.maxResponseBytes
        let reply = try await send(
            "GET", "/v1/topics/" + topic.rawValue, query: query,
            signing: topic.kind == .inbox ? .identity : access.map { .topicProof($0) } ?? .unsigned,
            what: "fetch of \(topic)", limit: bound,
            timeout: wait > .zero ? .seconds(waitSeconds) + requestTimeout : requestTimeout)
        if reply.oversized, reply.status == 200 { return .oversized }
        return .page(
            try reply.decode("fetch response", empty: WireFetchResponse()) { data throws(FrameDecodingError) in
                try FrameCodec.decode(WireFetchResponse.self, from: data, limit: bound)
            })
    }

    /// The long-poll loop of one subscription. Order and uniqueness rest on
    /// one cursor, `delivered`: the seq of the last envelope yielded (the
    /// subscription's cursor at first). Every fetch asks for envelopes
    /// after it, and an envelope is yielded only if its seq is above it,
    /// which then moves it; so whatever a relay answers (a repeat, an
    /// overlap, a page out of order), the stream's seqs strictly increase.
    /// The backlog is read without waiting; once it is read (an empty page,
    /// or, on an inbox, a page that reaches the head) `.caughtUp` is
    /// yielded and the fetches long-poll. On a capability topic only an
    /// empty page ends the backlog: a retired key's last fetch is refused
    /// with ACCESS_REVOKED instead, as the WebSocket ends its subscription
    /// before `Subscribed`.
    private nonisolated func poll(
        topic: TopicName, after cursor: UInt64, access: TopicAccess?,
        into continuation: AsyncThrowingStream<RelaySubscriptionEvent, any Error>.Continuation
    ) async {
        var delivered = cursor
        var caughtUp = false
        var pageLimit = Self.fetchPageLimit
        let clock = ContinuousClock()
        while !Task.isCancelled {
            let started = clock.now
            let outcome: FetchOutcome
            do {
                outcome = try await fetch(
                    topic, after: delivered, limit: pageLimit, wait: caughtUp ? longPollWait : .zero, access: access)
            } catch {
                // Ended by unsubscribe or close, which finished the stream.
                if Task.isCancelled { return }
                continuation.finish(throwing: error)
                return
            }
            guard case .page(let response) = outcome else {
                guard pageLimit > 1 else {
                    continuation.finish(
                        throwing: RelayClientError.protocolViolation(
                            "a fetch of one envelope exceeds \(Self.maxResponseBytes) bytes"))
                    return
                }
                pageLimit = 1
                continue
            }
            pageLimit = Self.fetchPageLimit
            if Task.isCancelled { return }
            let before = delivered
            for envelope in response.envelopes {
                guard envelope.topic == topic.rawValue else {
                    continuation.finish(
                        throwing: RelayClientError.protocolViolation(
                            "a fetch of \(topic) returned an envelope of \(envelope.topic)"))
                    return
                }
                guard envelope.seq > delivered else { continue }
                continuation.yield(.envelope(envelope))
                delivered = envelope.seq
            }
            if !response.envelopes.isEmpty, delivered == before {
                // Nothing new: fetching again would get the same answer.
                continuation.finish(
                    throwing: RelayClientError.protocolViolation(
                        "a fetch after seq \(before) of \(topic) returned nothing after it"))
                return
            }
            if !caughtUp {
                if response.envelopes.isEmpty || (access == nil && delivered >= response.headSeq) {
                    caughtUp = true
                    continuation.yield(.caughtUp(seq: max(delivered, response.headSeq)))
                }
            } else if response.envelopes.isEmpty {
                let elapsed = clock.now - started
                if elapsed < Self.minimumEmptyPollInterval {
                    try? await Task.sleep(for: Self.minimumEmptyPollInterval - elapsed)
                }
            }
        }
    }
}

// MARK: - Requests and answers

/// Where a relay's HTTP API is: its base URL (http or https) and origin.
struct HTTPRelayEndpoint: Sendable {
    let relayURL: URL
    let origin: String
    private let base: URLComponents
    private let basePath: String

    init?(_ relayURL: URL) {
        guard let origin = RelayOrigin.of(relayURL),
            var components = URLComponents(url: relayURL, resolvingAgainstBaseURL: false)
        else { return nil }
        switch components.scheme?.lowercased() {
        case "http", "ws": components.scheme = "http"
        case "https", "wss": components.scheme = "https"
        default: return nil
        }
        let path = components.percentEncodedPath
        basePath = path.hasSuffix("/") ? String(path.dropLast()) : path
        components.percentEncodedQuery = nil
        components.fragment = nil
        self.relayURL = relayURL
        self.origin = origin
        self.base = components
    }

    /// The URL of `path` (with `query`, "" for none), and the path as the
    /// relay sees it and signatures bind it.
    func target(path: String, query: String) -> (url: URL, path: String) {
        var components = base
        components.percentEncodedPath = basePath + path
        components.percentEncodedQuery = query.isEmpty ? nil : query
        // Topic names, inbox ids and the digits of a query need no escaping.
        return (components.url ?? relayURL, basePath + path)
    }
}

/// One answer of the relay: its status and (bounded) body.
struct HTTPRelayReply: Sendable {
    static let protobufContentType = "application/x-protobuf"

    var status: Int
    var body: Data
    var contentType: String?
    var retryAfter: String?
    /// The body exceeded the request's limit; it was dropped unread.
    var oversized = false
    var limit: Int
    /// The call rooms' long polls: the last sequence number the answer
    /// carries.
    var roomLastSeq: String? = nil

    private var isProtobuf: Bool {
        contentType?.lowercased().hasPrefix(Self.protobufContentType) == true
    }

    /// The answer's message (`empty` for an empty body, when given), or
    /// the typed error it carries.
    func decode<M>(
        _ what: String, empty: M? = nil, _ decode: (Data) throws(FrameDecodingError) -> M
    ) throws(RelayClientError) -> M {
        guard status == 200 else { throw failure() }
        guard !oversized else { throw .protocolViolation("the relay's answer exceeds \(limit) bytes") }
        guard isProtobuf else {
            throw .protocolViolation("expected \(Self.protobufContentType), got \(contentType ?? "no content type")")
        }
        if body.isEmpty, let empty { return empty }
        do {
            return try decode(body)
        } catch {
            throw .protocolViolation("undecodable \(what) from the relay: \(error)")
        }
    }

    /// The typed error of a refusal: the relay's `WireError` body, or one
    /// made from the status when there is none.
    func failure() -> RelayClientError {
        if !oversized, isProtobuf,
            let error = try? FrameCodec.decode(WireError.self, from: body, limit: HTTPRelayLink.maxResponseBytes),
            error.code != .unspecified
        {
            return RelayClientError(error)
        }
        let what = "HTTP \(status) without an error body"
        switch status {
        case 200: return .protocolViolation("the relay's answer exceeds \(limit) bytes")
        case 300..<400: return .protocolViolation("unexpected HTTP \(status) (redirects are not followed)")
        case 401: return .refused(code: .notAuthenticated, message: what)
        case 403: return .refused(code: .forbidden, message: what)
        case 404: return .refused(code: .notFound, message: what)
        case 408: return .timedOut(what)
        case 413: return .refused(code: .payloadTooLarge, message: what)
        case 429:
            let seconds = retryAfter.flatMap { Int64($0.trimmingCharacters(in: .whitespaces)) } ?? 1
            return .rateLimited(topic: "", retryAfter: .seconds(max(1, seconds)), message: what)
        case 400..<500: return .refused(code: .invalidRequest, message: what)
        // A gateway in front of the relay: the request may or may not
        // have reached it.
        case 502, 503, 504: return .disconnected(what)
        case 500..<600: return .refused(code: .internal, message: what)
        default: return .protocolViolation("unexpected HTTP \(status)")
        }
    }
}

/// Runs one link's requests on its own ephemeral session: the session's
/// delegate collects each body up to its request's limit, refuses
/// redirects, and maps transport failures to ``RelayClientError``.
/// Cancelling the calling task, the request's deadline or ``shutDown(_:)``
/// cancel the request at once.
///
/// `@unchecked Sendable`: every mutable property (`session`, `pending`,
/// `failedEarly`, `closed`) is read and written only while `lock` is held,
/// and a request's continuation is resumed outside the lock only by the
/// one caller that removed it from `pending` under the lock, so it is
/// resumed exactly once.
final class HTTPExchange: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    private struct Pending {
        var continuation: CheckedContinuation<Result<HTTPRelayReply, RelayClientError>, Never>
        var task: URLSessionDataTask
        var limit: Int
        var url: URL
        var body = Data()
        var oversized = false
    }

    // NSLock rather than Synchronization.Mutex: the package still targets
    // OS versions without it. Guards everything below.
    private let lock = NSLock()
    private var session: URLSession?
    // Keyed by the task itself: task identifiers count per session, and a
    // link replaces its session after an answer it abandoned.
    private var pending: [ObjectIdentifier: Pending] = [:]
    /// Requests failed before they were started.
    private var failedEarly: [ObjectIdentifier: RelayClientError] = [:]
    private var closed: RelayClientError?

    init(maxConnectionsPerHost: Int) {
        super.init()
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpMaximumConnectionsPerHost = maxConnectionsPerHost
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.urlCache = nil
        configuration.httpShouldSetCookies = false
        configuration.httpCookieAcceptPolicy = .never
        session = URLSession(configuration: configuration, delegate: self, delegateQueue: nil)
    }

    var isOpen: Bool { lock.withLock { closed == nil } }
    var closedError: RelayClientError? { lock.withLock { closed } }

    func perform(
        _ request: URLRequest, limit: Int, deadline: Duration, what: String, url: URL
    ) async throws(RelayClientError) -> HTTPRelayReply {
        // Tasks are made under the lock, so none is made once the session
        // is invalidated.
        let task = try makeTask(request).get()
        let id = ObjectIdentifier(task)
        let timer = Task { [weak self] in
            do {
                try await Task.sleep(for: deadline)
            } catch {
                return
            }
            self?.fail(task, .timedOut(what))
        }
        defer { timer.cancel() }
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                start(id, task, continuation, limit: limit, url: url)
            }
        } onCancel: {
            fail(task, .disconnected("\(what) was cancelled"))
        }
        return try result.get()
    }

    private func makeTask(_ request: URLRequest) -> Result<URLSessionDataTask, RelayClientError> {
        lock.lock()
        defer { lock.unlock() }
        guard closed == nil, let session else { return .failure(closed ?? .disconnected("closed")) }
        return .success(session.dataTask(with: request))
    }

    private func start(
        _ id: ObjectIdentifier, _ task: URLSessionDataTask,
        _ continuation: CheckedContinuation<Result<HTTPRelayReply, RelayClientError>, Never>, limit: Int, url: URL
    ) {
        lock.lock()
        if let error = failedEarly.removeValue(forKey: id) ?? closed {
            lock.unlock()
            task.cancel()
            continuation.resume(returning: .failure(error))
            return
        }
        pending[id] = Pending(continuation: continuation, task: task, limit: limit, url: url)
        lock.unlock()
        task.resume()
    }

    /// Fails a request (at once, whatever the transfer does next); one
    /// not started yet fails as it starts.
    private func fail(_ task: URLSessionDataTask, _ error: RelayClientError) {
        lock.lock()
        guard let request = pending.removeValue(forKey: ObjectIdentifier(task)) else {
            // Registered before it is resumed: a suspended task has not
            // started; any other has finished.
            if task.state == .suspended { failedEarly[ObjectIdentifier(task)] = error }
            lock.unlock()
            return
        }
        lock.unlock()
        request.task.cancel()
        request.continuation.resume(returning: .failure(error))
    }

    /// Fails every pending request with `reason` and invalidates the
    /// session; later requests fail with `reason` too.
    func shutDown(_ reason: RelayClientError) {
        lock.lock()
        if closed == nil { closed = reason }
        let failed = pending.values
        pending.removeAll()
        failedEarly.removeAll()
        let session = self.session
        self.session = nil
        lock.unlock()
        for request in failed { request.continuation.resume(returning: .failure(reason)) }
        session?.invalidateAndCancel()
    }

    // MARK: URLSessionDataDelegate

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        let tooLarge = lock.withLock { () -> Bool in
            guard let limit = pending[ObjectIdentifier(dataTask)]?.limit else { return false }
            guard response.expectedContentLength > Int64(limit) else { return false }
            pending[ObjectIdentifier(dataTask)]?.oversized = true
            return true
        }
        // An announced body over the limit is not read: the status and
        // headers are what the caller gets.
        if tooLarge { abandon(dataTask, of: session) }
        completionHandler(tooLarge ? .cancel : .allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        let tooLarge = lock.withLock { () -> Bool in
            guard var request = pending[ObjectIdentifier(dataTask)], !request.oversized else { return false }
            if request.body.count + data.count > request.limit {
                request.oversized = true
                request.body = Data()
            } else {
                request.body.append(data)
            }
            pending[ObjectIdentifier(dataTask)] = request
            return request.oversized
        }
        if tooLarge { abandon(dataTask, of: session) }
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        // A signed request goes to the relay it was signed for, or nowhere.
        completionHandler(nil)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        finish(task, error: error)
    }

    /// Answers an oversized request and stops reading it. Its connection
    /// still holds the rest of the answer, and Linux's URLSession was seen
    /// to send a later request on that connection, where it waited behind
    /// a body nobody reads: the session is replaced, so no request of this
    /// link uses a connection of the old one (which finishes what it has
    /// and goes). Only a broken or hostile relay sends such answers.
    private func abandon(_ task: URLSessionDataTask, of old: URLSession) {
        finish(task, error: nil)
        lock.lock()
        guard closed == nil, session === old else {
            lock.unlock()
            return
        }
        session = URLSession(configuration: old.configuration, delegate: self, delegateQueue: nil)
        lock.unlock()
        old.finishTasksAndInvalidate()
    }

    /// Answers a request with what its task brought, once.
    private func finish(_ task: URLSessionTask, error: (any Error)?) {
        lock.lock()
        guard let request = pending.removeValue(forKey: ObjectIdentifier(task)) else {
            lock.unlock()
            return
        }
        lock.unlock()
        if request.oversized { task.cancel() }
        let result: Result<HTTPRelayReply, RelayClientError>
        if let error, !request.oversized {
            result = .failure(Self.transportError(error, url: request.url))
        } else if let response = task.response as? HTTPURLResponse {
            result = .success(
                HTTPRelayReply(
                    status: response.statusCode, body: request.body,
                    contentType: response.value(forHTTPHeaderField: "Content-Type"),
                    retryAfter: response.value(forHTTPHeaderField: "Retry-After"), oversized: request.oversized,
                    limit: request.limit, roomLastSeq: response.value(forHTTPHeaderField: "Rally-Last-Seq")))
        } else {
            result = .failure(.protocolViolation("no HTTP response from \(request.url.absoluteString)"))
        }
        request.continuation.resume(returning: result)
    }

    /// Connection refused and the like: `.unreachable`; no answer in time:
    /// `.timedOut`; an answer that is not HTTP: `.protocolViolation`;
    /// anything else (a connection dropped mid-request): `.disconnected`.
    static func transportError(_ error: any Error, url: URL) -> RelayClientError {
        guard let error = error as? URLError else { return .disconnected("\(error)") }
        let reason = error.localizedDescription
        switch error.code {
        case .cannotConnectToHost, .cannotFindHost, .dnsLookupFailed, .notConnectedToInternet, .badURL,
            .unsupportedURL, .secureConnectionFailed, .serverCertificateUntrusted, .serverCertificateHasBadDate,
            .serverCertificateNotYetValid, .serverCertificateHasUnknownRoot, .clientCertificateRejected,
            .clientCertificateRequired, .appTransportSecurityRequiresSecureConnection, .internationalRoamingOff,
            .dataNotAllowed, .callIsActive:
            return .unreachable(url: url.absoluteString, reason: reason)
        case .timedOut: return .timedOut("\(url.path): \(reason)")
        case .badServerResponse, .cannotParseResponse, .zeroByteResource:
            return .protocolViolation("\(url.path): \(reason)")
        default: return .disconnected("\(url.path): \(reason)")
        }
    }
}

extension Duration {
    /// Whole seconds, a fraction counting as one more.
    fileprivate var wholeSecondsRoundedUp: Int64 {
        let (seconds, attoseconds) = components
        return max(0, attoseconds > 0 ? seconds + 1 : seconds)
    }
}
