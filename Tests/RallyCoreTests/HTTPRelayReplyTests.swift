import Foundation
import RallyCrypto
import RallyWire
import Testing

@testable import RallyCore

/// How the HTTP link reads the relay's answers (`HTTPRelayReply`) and where
/// it sends its requests (`HTTPRelayEndpoint`), with hostile or malformed
/// input: the link must turn anything into a typed `RelayClientError`.
@Suite("HTTP relay replies and endpoints")
struct HTTPRelayReplyTests {
    static let protobuf = HTTPRelayReply.protobufContentType

    static func reply(
        _ status: Int, _ body: Data = Data(), contentType: String? = protobuf, retryAfter: String? = nil,
        oversized: Bool = false, limit: Int = HTTPRelayLink.maxResponseBytes
    ) -> HTTPRelayReply {
        HTTPRelayReply(
            status: status, body: body, contentType: contentType, retryAfter: retryAfter, oversized: oversized,
            limit: limit)
    }

    /// Decodes a fetch response as the link does (an empty body is an
    /// empty page).
    static func fetch(_ reply: HTTPRelayReply) -> Result<WireFetchResponse, RelayClientError> {
        Result { () throws(RelayClientError) in
            try reply.decode("fetch response", empty: WireFetchResponse()) { data throws(FrameDecodingError) in
                try FrameCodec.decode(WireFetchResponse.self, from: data, limit: reply.limit)
            }
        }
    }

    /// Decodes a publish ack as the link does (no empty answer allowed).
    static func ack(_ reply: HTTPRelayReply) -> Result<WirePublishAck, RelayClientError> {
        Result { () throws(RelayClientError) in
            try reply.decode("publish ack") { data throws(FrameDecodingError) in
                try FrameCodec.decode(WirePublishAck.self, from: data, limit: reply.limit)
            }
        }
    }

    static var page: WireFetchResponse {
        var envelope = WireEnvelope()
        envelope.topic = "inbox/abc"
        envelope.seq = 7
        envelope.payload = Data(repeating: 0xab, count: 100)
        var page = WireFetchResponse()
        page.envelopes = [envelope]
        page.headSeq = 9
        return page
    }

    static func wireError(
        _ code: WireErrorCode, message: String = "", topic: String = "", retryAfterMs: UInt64 = 0, seq: UInt64 = 0
    ) -> Data {
        var error = WireError()
        error.code = code
        error.message = message
        error.topic = topic
        error.retryAfterMs = retryAfterMs
        error.seq = seq
        return FrameCodec.encode(error)
    }

    static func protocolViolation<T>(_ result: Result<T, RelayClientError>) -> String? {
        if case .failure(.protocolViolation(let reason)) = result { return reason }
        return nil
    }

    // MARK: - decode

    @Test("a 200 protobuf answer decodes; an empty body is the empty message only where one is allowed")
    func decodes() throws {
        let body = FrameCodec.encode(Self.page)
        #expect(try Self.fetch(Self.reply(200, body)).get() == Self.page)
        // Content types are compared without case and may carry parameters.
        #expect(try Self.fetch(Self.reply(200, body, contentType: "Application/X-Protobuf")).get() == Self.page)
        #expect(
            try Self.fetch(Self.reply(200, body, contentType: "application/x-protobuf; proto=rally.FetchResponse"))
                .get() == Self.page)
        #expect(try Self.fetch(Self.reply(200)).get() == WireFetchResponse())
        let emptyAck = Self.protocolViolation(Self.ack(Self.reply(200)))
        #expect(emptyAck == "undecodable publish ack from the relay: empty frame")
    }

    @Test(
        "a truncated or garbage protobuf body is a protocol violation",
        arguments: [
            ("truncated by one byte", FrameCodec.encode(HTTPRelayReplyTests.page).dropLast()),
            ("truncated to half", FrameCodec.encode(HTTPRelayReplyTests.page).prefix(40)),
            ("an invalid wire type", Data([0xff, 0xff, 0xff, 0xff])),
            ("a varint that never ends", Data(repeating: 0x80, count: 32)),
            ("a length past the end", Data([0x0a, 0x7f, 0x01])),
            ("text", Data("<html>502 Bad Gateway</html>".utf8)),
        ] as [(String, Data)])
    func malformedBodies(what: String, body: Data) {
        let result = Self.fetch(Self.reply(200, Data(body)))
        let reason = Self.protocolViolation(result)
        #expect(reason?.hasPrefix("undecodable fetch response from the relay: ") == true, "\(what): \(result)")
    }

    @Test(
        "a 200 answer that is not protobuf is a protocol violation, whatever its body",
        arguments: [
            "text/html", "text/plain; charset=utf-8", "application/json", "application/octet-stream",
            "application/protobuf", "", "x-protobuf",
        ])
    func wrongContentType(contentType: String) {
        let result = Self.fetch(Self.reply(200, FrameCodec.encode(Self.page), contentType: contentType))
        #expect(Self.protocolViolation(result) == "expected application/x-protobuf, got \(contentType)")
        let empty = Self.fetch(Self.reply(200, contentType: contentType))
        #expect(Self.protocolViolation(empty) == "expected application/x-protobuf, got \(contentType)")
    }

    @Test("a 200 answer without a content type is a protocol violation")
    func missingContentType() {
        let result = Self.fetch(Self.reply(200, FrameCodec.encode(Self.page), contentType: nil))
        #expect(Self.protocolViolation(result) == "expected application/x-protobuf, got no content type")
    }

    @Test("an answer over its limit is refused naming the limit; a refusal over it is judged by its status")
    func oversized() {
        let limit = HTTPRelayLink.maxFetchResponseBytes
        let refused = Self.fetch(Self.reply(200, oversized: true, limit: limit))
        #expect(Self.protocolViolation(refused) == "the relay's answer exceeds \(limit) bytes")
        // Even if some body was kept, an oversized answer is not decoded.
        let withBody = Self.fetch(Self.reply(200, FrameCodec.encode(Self.page), oversized: true, limit: limit))
        #expect(Self.protocolViolation(withBody) == "the relay's answer exceeds \(limit) bytes")
        #expect(
            Self.reply(200, oversized: true, limit: limit).failure()
                == .protocolViolation("the relay's answer exceeds \(limit) bytes"))
        // An error body over the limit is not read: the status speaks.
        let error = Self.reply(
            409, Self.wireError(.conflict, topic: "group/x", seq: 4), oversized: true, limit: limit)
        #expect(error.failure() == .refused(code: .invalidRequest, message: "HTTP 409 without an error body"))
        #expect(
            Self.fetch(error) == .failure(.refused(code: .invalidRequest, message: "HTTP 409 without an error body")))
    }

    // MARK: - failure

    @Test(
        "a refusal without an error body is typed by its status",
        arguments: [
            (400, RelayClientError.refused(code: .invalidRequest, message: "HTTP 400 without an error body")),
            (401, .refused(code: .notAuthenticated, message: "HTTP 401 without an error body")),
            (403, .refused(code: .forbidden, message: "HTTP 403 without an error body")),
            (404, .refused(code: .notFound, message: "HTTP 404 without an error body")),
            (405, .refused(code: .invalidRequest, message: "HTTP 405 without an error body")),
            (408, .timedOut("HTTP 408 without an error body")),
            (409, .refused(code: .invalidRequest, message: "HTTP 409 without an error body")),
            (413, .refused(code: .payloadTooLarge, message: "HTTP 413 without an error body")),
            (418, .refused(code: .invalidRequest, message: "HTTP 418 without an error body")),
            (499, .refused(code: .invalidRequest, message: "HTTP 499 without an error body")),
            (500, .refused(code: .internal, message: "HTTP 500 without an error body")),
            (501, .refused(code: .internal, message: "HTTP 501 without an error body")),
            (502, .disconnected("HTTP 502 without an error body")),
            (503, .disconnected("HTTP 503 without an error body")),
            (504, .disconnected("HTTP 504 without an error body")),
            (599, .refused(code: .internal, message: "HTTP 599 without an error body")),
            (300, .protocolViolation("unexpected HTTP 300 (redirects are not followed)")),
            (301, .protocolViolation("unexpected HTTP 301 (redirects are not followed)")),
            (302, .protocolViolation("unexpected HTTP 302 (redirects are not followed)")),
            (303, .protocolViolation("unexpected HTTP 303 (redirects are not followed)")),
            (304, .protocolViolation("unexpected HTTP 304 (redirects are not followed)")),
            (307, .protocolViolation("unexpected HTTP 307 (redirects are not followed)")),
            (308, .protocolViolation("unexpected HTTP 308 (redirects are not followed)")),
            (100, .protocolViolation("unexpected HTTP 100")),
            (101, .protocolViolation("unexpected HTTP 101")),
            (201, .protocolViolation("unexpected HTTP 201")),
            (204, .protocolViolation("unexpected HTTP 204")),
            (600, .protocolViolation("unexpected HTTP 600")),
            (0, .protocolViolation("unexpected HTTP 0")),
            (-1, .protocolViolation("unexpected HTTP -1")),
        ] as [(Int, RelayClientError)])
    func statusOnly(status: Int, expected: RelayClientError) {
        // No body, an empty protobuf body, a text body, garbage: the same.
        #expect(Self.reply(status).failure() == expected)
        #expect(Self.reply(status, contentType: nil).failure() == expected)
        #expect(Self.reply(status, Data("Service Unavailable".utf8), contentType: "text/plain").failure() == expected)
        #expect(Self.reply(status, Data([0xff, 0xff, 0xff])).failure() == expected)
        // decode() throws the same for any status but 200.
        #expect(Self.fetch(Self.reply(status)) == .failure(expected))
    }

    @Test(
        "429 without an error body is rate limited, after Retry-After's whole seconds (at least 1)",
        arguments: [
            ("7", Duration.seconds(7)),
            (" 12 ", .seconds(12)),
            ("3600", .seconds(3600)),
            ("1", .seconds(1)),
            ("0", .seconds(1)),
            ("-5", .seconds(1)),
            (nil, .seconds(1)),
            ("", .seconds(1)),
            ("soon", .seconds(1)),
            ("1.5", .seconds(1)),
            ("0x10", .seconds(1)),
            ("Wed, 21 Oct 2026 07:28:00 GMT", .seconds(1)),
            ("99999999999999999999999", .seconds(1)),
        ] as [(String?, Duration)])
    func rateLimitedByStatus(retryAfter: String?, expected: Duration) {
        let error = Self.reply(429, retryAfter: retryAfter).failure()
        #expect(error == .rateLimited(topic: "", retryAfter: expected, message: "HTTP 429 without an error body"))
        #expect(error.isTransient)
    }

    @Test("a WireError body with the code UNSPECIFIED is ignored: the status speaks")
    func unspecifiedCode() {
        let body = Self.wireError(.unspecified, message: "trust me", topic: "group/x", seq: 3)
        #expect(
            Self.reply(403, body).failure() == .refused(code: .forbidden, message: "HTTP 403 without an error body"))
        #expect(
            Self.reply(429, body, retryAfter: "2").failure()
                == .rateLimited(topic: "", retryAfter: .seconds(2), message: "HTTP 429 without an error body"))
        #expect(Self.reply(503, body).failure() == .disconnected("HTTP 503 without an error body"))
    }

    @Test(
        "a WireError body is the error, whatever the status",
        arguments: [
            (
                409, HTTPRelayReplyTests.wireError(.conflict, message: "lost the race", topic: "group/t", seq: 12),
                RelayClientError.conflict(topic: "group/t", lastControlSeq: 12)
            ),
            (
                403, HTTPRelayReplyTests.wireError(.accessRevoked, message: "replaced", topic: "group/t", seq: 5),
                .accessRevoked(topic: "group/t", lastReadableSeq: 5)
            ),
            (
                413, HTTPRelayReplyTests.wireError(.quotaExceeded, message: "inbox full", topic: "inbox/i"),
                .quotaExceeded(topic: "inbox/i", message: "inbox full")
            ),
            (
                429,
                HTTPRelayReplyTests.wireError(.rateLimited, message: "slow down", topic: "inbox/i", retryAfterMs: 2500),
                .rateLimited(topic: "inbox/i", retryAfter: .milliseconds(2500), message: "slow down")
            ),
            (
                403,
                HTTPRelayReplyTests.wireError(
                    .forbidden, message: "only its owner may read an inbox", topic: "inbox/i"),
                .refused(code: .forbidden, message: "only its owner may read an inbox")
            ),
            (
                404, HTTPRelayReplyTests.wireError(.notFound, message: "no key bundle"),
                .refused(code: .notFound, message: "no key bundle")
            ),
            (
                401, HTTPRelayReplyTests.wireError(.authenticationFailed, message: "replayed"),
                .refused(code: .authenticationFailed, message: "replayed")
            ),
            (
                503, HTTPRelayReplyTests.wireError(.shuttingDown, message: "bye"),
                .refused(code: .shuttingDown, message: "bye")
            ),
            // The body's code wins over a status that says otherwise.
            (
                500, HTTPRelayReplyTests.wireError(.conflict, topic: "group/t", seq: 1),
                .conflict(topic: "group/t", lastControlSeq: 1)
            ),
            (
                418, HTTPRelayReplyTests.wireError(.payloadTooLarge, message: "big"),
                .refused(code: .payloadTooLarge, message: "big")
            ),
            // A code from a newer relay is passed on as it is.
            (
                400, FrameCodec.encode(HTTPRelayReplyTests.unknownCodeError),
                .refused(code: .UNRECOGNIZED(99), message: "from the future")
            ),
        ] as [(Int, Data, RelayClientError)])
    func wireErrorBodies(status: Int, body: Data, expected: RelayClientError) {
        let reply = Self.reply(status, body, retryAfter: "60")
        #expect(reply.failure() == expected)
        #expect(Self.fetch(reply) == .failure(expected))
        #expect(Self.ack(reply) == .failure(expected))
    }

    static var unknownCodeError: WireError {
        var error = WireError()
        error.code = .UNRECOGNIZED(99)
        error.message = "from the future"
        return error
    }

    @Test("a WireError body is read only when it is protobuf and decodes")
    func untrustedErrorBodies() {
        let conflict = Self.wireError(.conflict, topic: "group/t", seq: 2)
        let byStatus = RelayClientError.refused(code: .invalidRequest, message: "HTTP 409 without an error body")
        #expect(Self.reply(409, conflict, contentType: "text/plain").failure() == byStatus)
        #expect(Self.reply(409, conflict, contentType: nil).failure() == byStatus)
        #expect(Self.reply(409, conflict.dropLast()).failure() == byStatus)
        #expect(Self.reply(409, Data([0xff, 0xff])).failure() == byStatus)
        // Larger than a frame: not decoded.
        var huge = WireError()
        huge.code = .conflict
        huge.message = String(repeating: "x", count: HTTPRelayLink.maxResponseBytes)
        #expect(Self.reply(409, FrameCodec.encode(huge)).failure() == byStatus)
    }

    // MARK: - HTTPRelayEndpoint

    @Test(
        "relay URLs map to the HTTP API: ws to http, wss to https, a base path kept once",
        arguments: [
            ("http://127.0.0.1:8080", "http://127.0.0.1:8080", "", "http://127.0.0.1:8080"),
            ("ws://127.0.0.1:8080", "http://127.0.0.1:8080", "", "http://127.0.0.1:8080"),
            ("ws://127.0.0.1:8080/", "http://127.0.0.1:8080", "", "http://127.0.0.1:8080"),
            ("http://relay.example", "http://relay.example", "", "http://relay.example:80"),
            ("https://relay.example", "https://relay.example", "", "https://relay.example"),
            ("wss://relay.example", "https://relay.example", "", "https://relay.example"),
            ("wss://relay.example:8443/", "https://relay.example:8443", "", "https://relay.example:8443"),
            ("WSS://relay.example", "https://relay.example", "", "https://relay.example"),
            ("https://relay.example/rally", "https://relay.example", "/rally", "https://relay.example"),
            ("https://relay.example/rally/", "https://relay.example", "/rally", "https://relay.example"),
            ("wss://relay.example/a/b/", "https://relay.example", "/a/b", "https://relay.example"),
            ("ws://relay.example:9000/rally", "http://relay.example:9000", "/rally", "http://relay.example:9000"),
            ("https://relay.example/my%20relay/", "https://relay.example", "/my%20relay", "https://relay.example"),
            // A query or fragment on the relay URL goes nowhere.
            ("https://relay.example/rally?token=1#top", "https://relay.example", "/rally", "https://relay.example"),
            ("http://[::1]:8080/", "http://[::1]:8080", "", "http://[::1]:8080"),
        ] as [(String, String, String, String)])
    func endpointMapping(relay: String, origin: String, basePath: String, signedOrigin: String) throws {
        let url = try #require(URL(string: relay))
        let endpoint = try #require(HTTPRelayEndpoint(url))
        #expect(endpoint.relayURL == url)
        #expect(endpoint.origin == signedOrigin)

        let publish = endpoint.target(path: "/v1/publish", query: "")
        #expect(publish.url.absoluteString == origin + basePath + "/v1/publish")
        #expect(publish.path == basePath + "/v1/publish")

        let fetch = endpoint.target(path: "/v1/topics/inbox/abc", query: "after=3&limit=100&wait=20")
        #expect(fetch.url.absoluteString == origin + basePath + "/v1/topics/inbox/abc?after=3&limit=100&wait=20")
        #expect(fetch.path == basePath + "/v1/topics/inbox/abc")
        #expect(fetch.url.query == "after=3&limit=100&wait=20")
        #expect(fetch.url.fragment == nil)
    }

    @Test(
        "other schemes and host-less URLs have no HTTP endpoint",
        arguments: [
            "ftp://relay.example", "file:///tmp/relay", "gopher://relay.example", "mailto:relay@relay.example",
            "relay.example", "/v1/publish", "http:relay.example", "ws:///v1/ws", "data:text/plain,relay",
            "javascript:alert(1)", "httpx://relay.example", "h2://relay.example",
        ])
    func rejectedSchemes(relay: String) throws {
        let url = try #require(URL(string: relay))
        #expect(HTTPRelayEndpoint(url) == nil)
    }

    @Test("connecting to a URL that is not http(s) or ws(s) fails as unreachable, without a request")
    func connectRejectsOtherSchemes() async throws {
        let url = try #require(URL(string: "ftp://relay.example"))
        do {
            _ = try await HTTPRelayLink.connect(to: url, identity: .init(displayName: "x"))
            Issue.record("connected to \(url)")
        } catch {
            #expect(error == .unreachable(url: "ftp://relay.example", reason: "not an http or https URL"))
        }
    }
}
