import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import NIOCore
import RallyCrypto
import RallyWire

/// The HTTP fallback: the WebSocket's operations as plain requests with
/// protobuf bodies, for networks that block WebSockets. Topic names go in the
/// path as their two segments: `/v1/topics/<kind>/<id>` (ADR 0002).
enum HTTPEndpoints {
    static let protobufContentType = "application/x-protobuf"

    static func addRoutes(to router: Router<RelayRequestContext>, services: RelayServices) {
        router.get("/healthz") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "text/plain; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: "ok")))
        }
        router.get("/metrics") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: services.metrics.exposition())))
        }
        router.post("/v1/publish") { request, context in
            await respond(services) { () async throws(RelayFailure) -> Data in
                FrameCodec.encode(try await publish(request, remoteIP: context.remoteIP, services: services))
            }
        }
        router.get("/v1/topics/{kind}/{id}") { request, context in
            await respond(services) { () async throws(RelayFailure) -> Data in
                FrameCodec.encode(
                    try await fetch(
                        request, kind: context.parameters.get("kind") ?? "", id: context.parameters.get("id") ?? "",
                        services: services))
            }
        }
        router.delete("/v1/topics/{kind}/{id}") { request, context in
            await respond(services) { () async throws(RelayFailure) -> Data in
                try await deleteTopic(
                    request, kind: context.parameters.get("kind") ?? "", id: context.parameters.get("id") ?? "",
                    services: services)
                return Data()
            }
        }
        router.put("/v1/keys") { request, _ in
            await respond(services) { () async throws(RelayFailure) -> Data in
                let limit = WireLimits.maxKeyBundleBytes + 256
                let bundle = try await decodeBody(request, limit: limit) { data throws(FrameDecodingError) in
                    try FrameCodec.decode(WireSignedKeyBundle.self, from: data, limit: limit)
                }
                return FrameCodec.encode(try await services.putKeyBundle(bundle))
            }
        }
        // One static page for `/join#<slug>` and the old `/join/<slug>`:
        // the slug is never echoed (ADR 0008, "Join page").
        let joinPage = Response(
            status: .ok, headers: JoinPage.headers, body: .init(byteBuffer: ByteBuffer(string: JoinPage.html)))
        router.get("/join") { _, _ in joinPage }
        router.get("/join/{slug}") { _, _ in joinPage }
        router.get("/v1/keys/{inboxID}") { _, context in
            await respond(services) { () async throws(RelayFailure) -> Data in
                FrameCodec.encode(try await services.keyBundle(inboxID: context.parameters.get("inboxID") ?? ""))
            }
        }
    }

    private static func publish(
        _ request: Request, remoteIP: String, services: RelayServices
    ) async throws(RelayFailure)
        -> WirePublishAck
    {
        let body = try await readBody(request, limit: WireLimits.maxFrameBytes)
        let publish = try decode(body) { data throws(FrameDecodingError) in
            try FrameCodec.decode(WirePublish.self, from: data, limit: WireLimits.maxFrameBytes)
        }
        let topic = try services.validateTopic(publish.topic, forCapability: true)
        var accessKey: Data?
        if topic.kind != .inbox {
            accessKey = try verifyTopicProof(request, body: body, topic: topic, services: services)
        }
        let validated = try services.validatePublish(publish, to: topic, accessKey: accessKey)
        try services.checkPublishRate(ip: remoteIP, identity: nil, topic: validated.topic)
        switch await services.writer.publish(validated) {
        case .success(let appended): return appended.ack
        case .failure(var failure):
            failure.topic = validated.topic
            throw failure
        }
    }

    private static func fetch(
        _ request: Request, kind: String, id: String, services: RelayServices
    )
        async throws(RelayFailure) -> WireFetchResponse
    {
        let topic = try services.validateTopic(kind + "/" + id, forCapability: true)
        var bound: UInt64?
        var accessKey: Data?
        if topic.kind == .inbox {
            try authorizeInboxRead(request, topic: topic, services: services)
        } else {
            let key = try verifyTopicProof(request, body: Data(), topic: topic, services: services)
            accessKey = key
            bound = try await services.readBound(topic: topic, key: key)
        }
        let query = request.uri.queryParameters
        let after = try number(query["after"], name: "after", default: UInt64(0))
        let limits = services.limits
        let requestedLimit = try number(query["limit"], name: "limit", default: UInt64(limits.defaultFetchLimit))
        let limit = Int(clamping: min(max(requestedLimit, 1), UInt64(limits.maxFetchLimit)))
        let waitSeconds = try number(query["wait"], name: "wait", default: UInt64(0))
        let wait = min(Duration.seconds(Int64(clamping: waitSeconds)), limits.maxLongPollWait)
        if let bound, after >= bound { throw revoked(topic.rawValue, bound) }

        // Registered before the first read, so an envelope committed between
        // the read and the wait still wakes the poll.
        let waiter = wait > .zero ? services.hub.subscribe(topic: topic.rawValue, capacity: 1) : nil
        do throws(RelayFailure) {
            var result = try await read(topic.rawValue, after: after, limit: limit, services: services)
            if let waiter, result.envelopes.isEmpty {
                await waitForFirst(of: waiter, timeout: wait)
                result = try await read(topic.rawValue, after: after, limit: limit, services: services)
            }
            if let waiter { services.hub.unsubscribe(waiter.id) }
            var response = WireFetchResponse()
            // A retired key reads up to its last seq (and a rotation in this
            // page that retires it sets that seq).
            for envelope in result.envelopes {
                if let bound, envelope.seq > bound { break }
                response.envelopes.append(envelope)
                if bound == nil, let accessKey, result.retiredKeys[envelope.seq] == accessKey { bound = envelope.seq }
            }
            if let bound, response.envelopes.isEmpty, result.headSeq >= bound { throw revoked(topic.rawValue, bound) }
            response.headSeq = bound.map { min($0, result.headSeq) } ?? result.headSeq
            return response
        } catch {
            if let waiter { services.hub.unsubscribe(waiter.id) }
            throw error
        }
    }

    private static func read(
        _ topic: String, after: UInt64, limit: Int, services: RelayServices
    )
        async throws(RelayFailure) -> FetchResult
    {
        do {
            return try await services.store.fetch(
                topic: topic, after: after, limit: limit, maxBytes: services.limits.backlogPageBytes,
                nowMilliseconds: services.clock.nowMilliseconds)
        } catch {
            services.logger.error("fetch failed", metadata: ["topic": "\(topic)", "error": "\(error)"])
            throw RelayFailure(.internal, "could not read the topic", topic: topic)
        }
    }

    /// Returns when an envelope arrives, the timeout passes, the relay shuts
    /// down or the request is cancelled.
    private static func waitForFirst(of subscription: TopicHub.Subscription, timeout: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await _ in subscription.items { return }
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
            }
            await group.next()
            group.cancelAll()
        }
    }

    private static func revoked(_ topic: String, _ bound: UInt64) -> RelayFailure {
        RelayFailure(
            .accessRevoked, "this access key was replaced; it may read up to seq \(bound)", topic: topic, seq: bound)
    }

    static let topicProofField = HTTPField.Name(HTTPAuthorization.topicProofHeader)!

    /// The request binding for `origin`; the header supplies time and nonce.
    /// Deletes a capability topic for whoever proves its current access
    /// key (a group's owner deleting the group, docs/adr/0017). The relay
    /// learns that the topic ended, never who was in it. A retry after a
    /// lost answer succeeds.
    private static func deleteTopic(
        _ request: Request, kind: String, id: String, services: RelayServices
    ) async throws(RelayFailure) {
        let topic = try services.validateTopic(kind + "/" + id, forCapability: true)
        guard topic.kind != .inbox else {
            throw RelayFailure(.forbidden, "an inbox cannot be deleted", topic: topic.rawValue)
        }
        let key = try verifyTopicProof(request, body: Data(), topic: topic, services: services)
        let outcome: TopicDeletion
        do {
            outcome = try await services.store.deleteTopic(
                topic.rawValue, accessKey: key, nowMilliseconds: services.clock.nowMilliseconds)
        } catch {
            services.logger.error("deleting a topic failed", metadata: ["topic": "\(topic)", "error": "\(error)"])
            throw RelayFailure(.internal, "could not delete the topic", topic: topic.rawValue)
        }
        switch outcome {
        case .deleted, .alreadyDeleted:
            return
        case .refused(.retired(let validThrough)):
            throw RelayFailure(
                .accessRevoked, "only the topic's current access key may delete it", topic: topic.rawValue,
                seq: validThrough)
        case .refused(.unregistered):
            throw RelayFailure(.notFound, "no such topic", topic: topic.rawValue)
        case .refused:
            throw RelayFailure(.forbidden, "this access key is not the topic's current one", topic: topic.rawValue)
        }
    }

    private static func binding(_ request: Request, body: Data, origin: String) -> HTTPRequestBinding {
        HTTPRequestBinding(
            origin: origin, method: request.method.rawValue, path: request.uri.path, query: request.uri.query ?? "",
            body: body, millis: 0, nonce: Data())
    }

    /// Tries each origin the relay answers to; the first that verifies wins.
    static func verifyBound<T>(
        _ request: Request, body: Data, services: RelayServices, topic: String,
        _ verify: (HTTPRequestBinding) throws(RallyCryptoError) -> T
    ) throws(RelayFailure) -> T {
        var lastError = RallyCryptoError.invalidSignature("request")
        for origin in services.origins.current {
            do {
                return try verify(binding(request, body: body, origin: origin))
            } catch {
                lastError = error
                if case .invalidSignature = error { continue }
                break
            }
        }
        throw RelayFailure(.authenticationFailed, lastError.description, topic: topic)
    }

    /// Checks `Rally-Topic-Proof` and returns its (verified) access key.
    private static func verifyTopicProof(
        _ request: Request, body: Data, topic: TopicName, services: RelayServices
    ) throws(RelayFailure) -> Data {
        try verifyTopicProof(request, body: body, topic: topic.rawValue, services: services, what: "this topic")
    }

    /// Checks `Rally-Topic-Proof` on a request about `topic` (a topic name,
    /// or `escrow/<id>`, whose keys are capabilities too) and returns its
    /// verified key; the caller checks the key. `what` names, in the refusal
    /// of a request without one, what needs it.
    static func verifyTopicProof(
        _ request: Request, body: Data, topic: String, services: RelayServices, what: String
    ) throws(RelayFailure) -> Data {
        guard let header = request.headers[topicProofField] else {
            throw RelayFailure(.forbidden, "\(what) needs a \(HTTPAuthorization.topicProofHeader) header", topic: topic)
        }
        let now = services.clock.now
        let verified = try verifyBound(request, body: body, services: services, topic: topic) {
            binding throws(RallyCryptoError) in
            try HTTPAuthorization.verifyTopicProof(header: header, binding: binding, now: now)
        }
        try services.rememberNonce(verified, topic: topic)
        return verified.key
    }

    /// The identity whose `Authorization` signs this request (bound to its
    /// method, path, query and body, used once); `what` says, in the
    /// refusal of a request without one, what needs it.
    static func authenticate(
        _ request: Request, body: Data, topic: String, services: RelayServices, what: String
    ) throws(RelayFailure) -> InboxID {
        guard let header = request.headers[.authorization] else {
            throw RelayFailure(.notAuthenticated, "\(what) needs an Authorization header", topic: topic)
        }
        let now = services.clock.now
        let (signer, verified) = try verifyBound(request, body: body, services: services, topic: topic) {
            binding throws(RallyCryptoError) in
            try HTTPAuthorization.verify(header: header, binding: binding, now: now)
        }
        try services.rememberNonce(verified, topic: topic)
        return signer
    }

    private static func authorizeInboxRead(
        _ request: Request, topic: TopicName, services: RelayServices
    )
        throws(RelayFailure)
    {
        let reader = try authenticate(
            request, body: Data(), topic: topic.rawValue, services: services, what: "reading an inbox")
        guard reader.rawValue == topic.id else {
            throw RelayFailure(.forbidden, "only its owner may read an inbox", topic: topic.rawValue)
        }
    }

    static func number(_ text: Substring?, name: String, default value: UInt64) throws(RelayFailure) -> UInt64 {
        guard let text, !text.isEmpty else { return value }
        guard let parsed = UInt64(text) else {
            throw RelayFailure(.invalidRequest, "query parameter \(name) must be a non-negative integer")
        }
        return parsed
    }

    static func readBody(_ request: Request, limit: Int) async throws(RelayFailure) -> Data {
        var request = request
        do {
            return Data(try await request.collectBody(upTo: limit).readableBytesView)
        } catch let error as HTTPError where error.status == .contentTooLarge {
            throw RelayFailure(.frameTooLarge, "request body exceeds \(limit) bytes")
        } catch is NIOTooManyBytesError {
            // What collecting a streamed body past the limit throws.
            throw RelayFailure(.frameTooLarge, "request body exceeds \(limit) bytes")
        } catch {
            throw RelayFailure(.malformedFrame, "could not read the request body")
        }
    }

    /// Reads a body of at most `limit` bytes and decodes it with `decode`.
    private static func decodeBody<M>(
        _ request: Request, limit: Int, _ decode: (Data) throws(FrameDecodingError) -> M
    ) async throws(RelayFailure) -> M {
        try Self.decode(try await readBody(request, limit: limit), decode)
    }

    /// Decodes a body read already, a decoding failure as the relay's
    /// refusal.
    static func decode<M>(
        _ body: Data, _ decode: (Data) throws(FrameDecodingError) -> M
    ) throws(RelayFailure) -> M {
        do {
            return try decode(body)
        } catch {
            switch error {
            case .tooLarge: throw RelayFailure(.frameTooLarge, error.description)
            case .empty, .malformed: throw RelayFailure(.malformedFrame, error.description)
            }
        }
    }

    /// Runs an operation and answers with its encoded result, or with the
    /// failure's status and `WireError`.
    static func respond(
        _ services: RelayServices, _ body: () async throws(RelayFailure) -> Data
    ) async -> Response {
        do {
            return protobuf(.ok, try await body())
        } catch {
            return failureResponse(error, services: services)
        }
    }

    /// A refusal's status with its `WireError` body.
    static func failureResponse(_ error: RelayFailure, services: RelayServices) -> Response {
        services.metrics.recordError(error.code)
        var response = protobuf(error.httpStatus, FrameCodec.encode(error.wire))
        if error.code == .rateLimited {
            let seconds = (error.retryAfterMilliseconds + 999) / 1000
            response.headers[.retryAfter] = String(max(1, seconds))
        }
        return response
    }

    private static func protobuf(_ status: HTTPResponse.Status, _ bytes: Data) -> Response {
        Response(
            status: status, headers: [.contentType: protobufContentType],
            body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
    }
}
