import Foundation
import Hummingbird
import HummingbirdWebSocket
import RallyCrypto
import RallyWire

/// The HTTP fallback: the WebSocket's operations as plain requests with
/// protobuf bodies, for networks that block WebSockets. Topic names go in the
/// path as their two segments: `/v1/topics/<kind>/<id>` (ADR 0002).
enum HTTPEndpoints {
    static let protobufContentType = "application/x-protobuf"

    static func addRoutes(to router: Router<BasicWebSocketRequestContext>, services: RelayServices) {
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
        router.post("/v1/publish") { request, _ in
            await respond(services) { () async throws(RelayFailure) -> Data in
                FrameCodec.encode(try await publish(request, services: services))
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
        router.put("/v1/keys") { request, _ in
            await respond(services) { () async throws(RelayFailure) -> Data in
                let limit = WireLimits.maxKeyBundleBytes + 256
                let bundle = try await decodeBody(request, limit: limit) { data throws(FrameDecodingError) in
                    try FrameCodec.decode(WireSignedKeyBundle.self, from: data, limit: limit)
                }
                return FrameCodec.encode(try await services.putKeyBundle(bundle))
            }
        }
        router.get("/join/{slug}") { request, context in
            let host = request.head.authority ?? "localhost"
            var headers = JoinPage.headers
            switch JoinPage.render(slug: context.parameters.get("slug") ?? "", host: host) {
            case .page(let html):
                return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: html)))
            case .badSlug(let reason):
                headers[.contentType] = "text/plain; charset=utf-8"
                return Response(
                    status: .badRequest, headers: headers,
                    body: .init(byteBuffer: ByteBuffer(string: "This is not a Rally invite link: \(reason).")))
            }
        }
        router.get("/v1/keys/{inboxID}") { _, context in
            await respond(services) { () async throws(RelayFailure) -> Data in
                FrameCodec.encode(try await services.keyBundle(inboxID: context.parameters.get("inboxID") ?? ""))
            }
        }
    }

    private static func publish(
        _ request: Request, services: RelayServices
    ) async throws(RelayFailure)
        -> WirePublishAck
    {
        let publish = try await decodeBody(request, limit: WireLimits.maxFrameBytes) {
            data throws(FrameDecodingError) in
            try FrameCodec.decode(WirePublish.self, from: data, limit: WireLimits.maxFrameBytes)
        }
        let validated = try services.validatePublish(publish)
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
        let topic = try services.validateTopic(kind + "/" + id)
        if topic.kind == .inbox {
            try authorizeInboxRead(request, topic: topic, services: services)
        }
        let query = request.uri.queryParameters
        let after = try number(query["after"], name: "after", default: UInt64(0))
        let limits = services.limits
        let requestedLimit = try number(query["limit"], name: "limit", default: UInt64(limits.defaultFetchLimit))
        let limit = Int(clamping: min(max(requestedLimit, 1), UInt64(limits.maxFetchLimit)))
        let waitSeconds = try number(query["wait"], name: "wait", default: UInt64(0))
        let wait = min(Duration.seconds(Int64(clamping: waitSeconds)), limits.maxLongPollWait)

        // Registered before the first read, so an envelope committed between
        // the read and the wait still wakes the poll.
        let waiter = wait > .zero ? await services.hub.subscribe(topic: topic.rawValue, capacity: 1) : nil
        do {
            var result = try await read(topic.rawValue, after: after, limit: limit, services: services)
            if let waiter, result.envelopes.isEmpty {
                await waitForFirst(of: waiter, timeout: wait)
                result = try await read(topic.rawValue, after: after, limit: limit, services: services)
            }
            if let waiter { await services.hub.unsubscribe(waiter.id) }
            var response = WireFetchResponse()
            response.envelopes = result.envelopes
            response.headSeq = result.headSeq
            return response
        } catch {
            if let waiter { await services.hub.unsubscribe(waiter.id) }
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
                topic: topic, after: after, limit: limit, nowMilliseconds: services.clock.nowMilliseconds)
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
                for await _ in subscription.envelopes { return }
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
            }
            await group.next()
            group.cancelAll()
        }
    }

    private static func authorizeInboxRead(
        _ request: Request, topic: TopicName, services: RelayServices
    )
        throws(RelayFailure)
    {
        guard let header = request.headers[.authorization] else {
            throw RelayFailure(
                .notAuthenticated, "reading an inbox needs an Authorization header", topic: topic.rawValue)
        }
        let reader: InboxID
        do {
            reader = try HTTPAuthorization.verify(
                header: header, method: "GET", path: request.uri.path, now: services.clock.now)
        } catch {
            throw RelayFailure(.authenticationFailed, error.description, topic: topic.rawValue)
        }
        guard reader.rawValue == topic.id else {
            throw RelayFailure(.forbidden, "only its owner may read an inbox", topic: topic.rawValue)
        }
    }

    private static func number(_ text: Substring?, name: String, default value: UInt64) throws(RelayFailure) -> UInt64 {
        guard let text, !text.isEmpty else { return value }
        guard let parsed = UInt64(text) else {
            throw RelayFailure(.invalidRequest, "query parameter \(name) must be a non-negative integer")
        }
        return parsed
    }

    /// Reads a body of at most `limit` bytes and decodes it with `decode`.
    private static func decodeBody<M>(
        _ request: Request, limit: Int, _ decode: (Data) throws(FrameDecodingError) -> M
    ) async throws(RelayFailure) -> M {
        var request = request
        let buffer: ByteBuffer
        do {
            buffer = try await request.collectBody(upTo: limit)
        } catch let error as HTTPError where error.status == .contentTooLarge {
            throw RelayFailure(.frameTooLarge, "request body exceeds \(limit) bytes")
        } catch {
            throw RelayFailure(.malformedFrame, "could not read the request body")
        }
        do {
            return try decode(Data(buffer.readableBytesView))
        } catch {
            switch error {
            case .tooLarge: throw RelayFailure(.frameTooLarge, error.description)
            case .empty, .malformed: throw RelayFailure(.malformedFrame, error.description)
            }
        }
    }

    /// Runs an operation and answers with its encoded result, or with the
    /// failure's status and `WireError`.
    private static func respond(
        _ services: RelayServices, _ body: () async throws(RelayFailure) -> Data
    ) async -> Response {
        do {
            return protobuf(.ok, try await body())
        } catch {
            services.metrics.recordError(error.code)
            var response = protobuf(error.httpStatus, FrameCodec.encode(error.wire))
            if error.code == .rateLimited {
                let seconds = (error.retryAfterMilliseconds + 999) / 1000
                response.headers[.retryAfter] = String(max(1, seconds))
            }
            return response
        }
    }

    private static func protobuf(_ status: HTTPResponse.Status, _ bytes: Data) -> Response {
        Response(
            status: status, headers: [.contentType: protobufContentType],
            body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
    }
}
