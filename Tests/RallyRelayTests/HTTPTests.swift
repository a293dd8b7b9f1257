import Foundation
import RallyCrypto
import RallyWire
import Testing

@testable import RallyRelay

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A relay on a free loopback port with a temporary store.
struct RelayFixture {
    let directory: TemporaryDirectory
    let relay: RunningRelay

    init(limits: RelayLimits = .default) async throws {
        directory = try TemporaryDirectory()
        relay = try await RunningRelay.start(
            configuration: RelayConfiguration(port: 0, dataDirectory: directory.url, limits: limits), logger: .quiet)
    }

    func stop() async {
        await relay.stop()
        directory.remove()
    }

    func http(
        _ method: String, _ path: String, body: Data? = nil, headers: [String: String] = [:]
    ) async throws -> (status: Int, body: Data, contentType: String?) {
        var request = URLRequest(url: URL(string: relay.url.absoluteString + path)!)
        request.httpMethod = method
        request.httpBody = body
        request.timeoutInterval = 60
        if body != nil { request.setValue("application/x-protobuf", forHTTPHeaderField: "Content-Type") }
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let (data, response) = try await URLSession.shared.data(for: request)
        let http = try #require(response as? HTTPURLResponse)
        return (http.statusCode, data, http.value(forHTTPHeaderField: "Content-Type"))
    }

    func publish(_ publish: WirePublish) async throws -> (status: Int, body: Data) {
        let result = try await http("POST", "/v1/publish", body: FrameCodec.encode(publish))
        return (result.status, result.body)
    }
}

extension Data {
    var ack: WirePublishAck? { try? FrameCodec.decode(WirePublishAck.self, from: self, limit: 1 << 20) }
    var wireError: WireError? { try? FrameCodec.decode(WireError.self, from: self, limit: 1 << 20) }
    var fetchResponse: WireFetchResponse? {
        isEmpty ? WireFetchResponse() : try? FrameCodec.decode(WireFetchResponse.self, from: self, limit: 1 << 24)
    }
}

@Suite("HTTP fallback and operations", .timeLimit(.minutes(1)))
struct HTTPTests {
    @Test("healthz and Prometheus metrics")
    func operations() async throws {
        let fixture = try await RelayFixture()
        let health = try await fixture.http("GET", "/healthz")
        #expect(health.status == 200)
        #expect(String(decoding: health.body, as: UTF8.self) == "ok")
        _ = try await fixture.publish(publishBody(groupTopic, "x"))
        _ = try await fixture.publish(publishBody("Bad Topic", "x"))
        let metrics = String(decoding: try await fixture.http("GET", "/metrics").body, as: UTF8.self)
        #expect(metrics.contains("rally_relay_publishes_total 1"))
        #expect(metrics.contains(#"rally_relay_errors_total{code="invalid_topic"} 1"#))
        #expect(metrics.contains("rally_relay_commit_batch_size_count"))
        #expect(metrics.contains("rally_relay_open_connections"))
        await fixture.stop()
    }

    @Test("two relays run side by side in one process")
    func twoRelays() async throws {
        let first = try await RelayFixture()
        let second = try await RelayFixture()
        #expect(first.relay.port != second.relay.port)
        #expect(try await first.http("GET", "/healthz").status == 200)
        #expect(try await second.http("GET", "/healthz").status == 200)
        await first.stop()
        await second.stop()
    }

    @Test("publish, retry and fetch over HTTP")
    func publishAndFetch() async throws {
        let fixture = try await RelayFixture()
        for index in 1...5 {
            let result = try await fixture.publish(publishBody(groupTopic, "m\(index)", key: "k\(index)"))
            #expect(result.status == 200)
            #expect(result.body.ack?.seq == UInt64(index))
        }
        let retry = try await fixture.publish(publishBody(groupTopic, "m2", key: "k2"))
        #expect(retry.body.ack?.seq == 2)
        #expect(retry.body.ack?.duplicate == true)

        let page = try await fixture.http("GET", "/v1/topics/\(groupTopic)?after=1&limit=2")
        #expect(page.status == 200)
        #expect(page.contentType == "application/x-protobuf")
        #expect(page.body.fetchResponse?.envelopes.map(\.seq) == [2, 3])
        #expect(page.body.fetchResponse?.envelopes.first?.payload == Data("m2".utf8))
        #expect(page.body.fetchResponse?.headSeq == 5)

        let tooBig = try await fixture.publish(
            {
                var publish = publishBody(groupTopic, "")
                publish.payload = Data(count: WireLimits.maxPayloadBytes + 1)
                return publish
            }())
        #expect(tooBig.status == 413)
        #expect(tooBig.body.wireError?.code == .payloadTooLarge)
        let garbage = try await fixture.http("POST", "/v1/publish", body: Data([0xFF, 0xFF, 0xFF]))
        #expect(garbage.status == 400)
        #expect(garbage.body.wireError?.code == .malformedFrame)
        let badQuery = try await fixture.http("GET", "/v1/topics/\(groupTopic)?after=-1")
        #expect(badQuery.body.wireError?.code == .invalidRequest)
        #expect(try await fixture.http("GET", "/v1/topics/\(groupTopic)?after=5").body.fetchResponse?.envelopes == [])
        await fixture.stop()
    }

    @Test("a long-poll returns as soon as an envelope is committed")
    func longPoll() async throws {
        let fixture = try await RelayFixture()
        _ = try await fixture.publish(publishBody(groupTopic, "old"))
        let poll = Task { try await fixture.http("GET", "/v1/topics/\(groupTopic)?after=1&wait=30") }
        // Publish only once the poll is waiting, so it must be woken.
        while await fixture.relay.server.services.hub.subscriberCount(topic: groupTopic) == 0 {
            try await Task.sleep(for: .milliseconds(2))
        }
        _ = try await fixture.publish(publishBody(groupTopic, "new"))
        let result = try await poll.value
        #expect(result.status == 200)
        #expect(result.body.fetchResponse?.envelopes.map(\.payload) == [Data("new".utf8)])
        await fixture.stop()
    }

    @Test("a long-poll with nothing new ends at its wait with no envelopes")
    func longPollTimeout() async throws {
        let fixture = try await RelayFixture()
        let result = try await fixture.http("GET", "/v1/topics/\(groupTopic)?after=0&wait=1")
        #expect(result.status == 200)
        #expect(result.body.fetchResponse?.envelopes == [])
        await fixture.stop()
    }

    @Test("an inbox is fetched only with its owner's signature")
    func inboxAuthorization() async throws {
        let fixture = try await RelayFixture()
        let owner = Identity(displayName: "Owner")
        let stranger = Identity(displayName: "Stranger")
        let topic = "inbox/" + owner.inboxID.rawValue
        let path = "/v1/topics/" + topic
        #expect(try await fixture.publish(publishBody(topic, "for owner")).status == 200)

        let anonymous = try await fixture.http("GET", path)
        #expect(anonymous.status == 401)
        #expect(anonymous.body.wireError?.code == .notAuthenticated)

        let strangerHeader = HTTPAuthorization.header(identity: stranger, method: "GET", path: path, now: Date())
        let forbidden = try await fixture.http("GET", path, headers: ["Authorization": strangerHeader])
        #expect(forbidden.status == 403)
        #expect(forbidden.body.wireError?.code == .forbidden)

        let wrongPath = HTTPAuthorization.header(identity: owner, method: "GET", path: "/v1/topics/other", now: Date())
        #expect(try await fixture.http("GET", path, headers: ["Authorization": wrongPath]).status == 401)
        let stale = HTTPAuthorization.header(
            identity: owner, method: "GET", path: path, now: Date().addingTimeInterval(-3600))
        #expect(try await fixture.http("GET", path, headers: ["Authorization": stale]).status == 401)

        let header = HTTPAuthorization.header(identity: owner, method: "GET", path: path, now: Date())
        let allowed = try await fixture.http("GET", path + "?after=0", headers: ["Authorization": header])
        #expect(allowed.status == 200)
        #expect(allowed.body.fetchResponse?.envelopes.map(\.payload) == [Data("for owner".utf8)])
        await fixture.stop()
    }

    @Test("key bundles over HTTP")
    func keyBundles() async throws {
        let fixture = try await RelayFixture()
        let identity = Identity(displayName: "Ada")
        let path = "/v1/keys/" + identity.inboxID.rawValue
        let missing = try await fixture.http("GET", path)
        #expect(missing.status == 404)
        #expect(missing.body.wireError?.code == .notFound)

        var forged = identity.signedKeyBundle()
        forged.signature[3] ^= 0x10
        let refused = try await fixture.http("PUT", "/v1/keys", body: FrameCodec.encode(forged))
        #expect(refused.status == 400)
        #expect(refused.body.wireError?.code == .invalidSignature)
        #expect(try await fixture.http("GET", path).status == 404)

        let bundle = identity.signedKeyBundle()
        #expect(try await fixture.http("PUT", "/v1/keys", body: FrameCodec.encode(bundle)).status == 200)
        let fetched = try await fixture.http("GET", path)
        #expect(fetched.status == 200)
        #expect(try FrameCodec.decode(WireSignedKeyBundle.self, from: fetched.body, limit: 8192) == bundle)
        await fixture.stop()
    }

    @Test("data survives a relay restart on the same directory")
    func restart() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let configuration = RelayConfiguration(port: 0, dataDirectory: directory.url)
        let first = try await RunningRelay.start(configuration: configuration, logger: .quiet)
        let firstFixture = RelayFixtureView(url: first.url)
        #expect(try await firstFixture.publish(publishBody(groupTopic, "1", key: "a")).body.ack?.seq == 1)
        await first.stop()

        let second = try await RunningRelay.start(configuration: configuration, logger: .quiet)
        let secondFixture = RelayFixtureView(url: second.url)
        let retry = try await secondFixture.publish(publishBody(groupTopic, "1", key: "a"))
        #expect(retry.body.ack?.seq == 1 && retry.body.ack?.duplicate == true)
        #expect(try await secondFixture.publish(publishBody(groupTopic, "2")).body.ack?.seq == 2)
        await second.stop()
    }
}

/// HTTP helpers for a relay that the test starts and stops itself.
struct RelayFixtureView {
    let url: URL

    func publish(_ publish: WirePublish) async throws -> (status: Int, body: Data) {
        var request = URLRequest(url: url.appendingPathComponent("v1/publish"))
        request.httpMethod = "POST"
        request.httpBody = FrameCodec.encode(publish)
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, data)
    }
}

@Suite("The web link's page", .timeLimit(.minutes(1)))
struct JoinPageTests {
    static let slug = "EAoQAQIDBAUGBwgJCgsMDQ4PEBI-_abcXYZ019"

    @Test("GET /join/<slug> hands the invite to the app and the CLI, and leaks it nowhere")
    func page() async throws {
        let fixture = try await RelayFixture()
        var request = URLRequest(url: URL(string: fixture.relay.url.absoluteString + "/join/\(Self.slug)")!)
        request.httpMethod = "GET"
        let (data, response) = try await URLSession.shared.data(for: request)
        let http = try #require(response as? HTTPURLResponse)
        let html = String(decoding: data, as: UTF8.self)
        #expect(http.statusCode == 200)
        #expect(http.value(forHTTPHeaderField: "Content-Type") == "text/html; charset=utf-8")
        #expect(http.value(forHTTPHeaderField: "Referrer-Policy") == "no-referrer")
        #expect(http.value(forHTTPHeaderField: "Cache-Control") == "no-store")
        #expect(http.value(forHTTPHeaderField: "Content-Security-Policy")?.hasPrefix("default-src 'none'") == true)
        #expect(html.contains("href=\"rally://join/\(Self.slug)\""))
        #expect(html.contains("rally join https://"))
        await fixture.stop()
    }

    @Test(
        "Anything but a base64url slug of sane length is refused, never echoed",
        arguments: [
            ("%3Cscript%3Ealert(1)%3C%2Fscript%3E", "outside base64url"),
            ("abc%22onload%3D", "outside base64url"),
            ("slug.with.dots", "outside base64url"),
            (String(repeating: "A", count: WireLimits.maxInviteSlugCharacters + 1), "longer than"),
        ])
    func refused(path: String, reason: String) async throws {
        let fixture = try await RelayFixture()
        let result = try await fixture.http("GET", "/join/\(path)")
        #expect(result.status == 400)
        let body = String(decoding: result.body, as: UTF8.self)
        #expect(body.contains(reason))
        #expect(!body.contains("<script"))
        #expect(result.contentType == "text/plain; charset=utf-8")
        await fixture.stop()
    }

    @Test("The renderer escapes the host and accepts the longest slug")
    func renderer() {
        guard case .page(let html) = JoinPage.render(slug: "abc", host: "evil\"><script>") else {
            Issue.record("expected a page")
            return
        }
        #expect(!html.contains("<script>"))
        #expect(html.contains("evil&quot;&gt;&lt;script&gt;"))
        let longest = String(repeating: "A", count: WireLimits.maxInviteSlugCharacters)
        #expect(JoinPage.render(slug: longest, host: "h") != .badSlug("the invite is longer than 4096 characters"))
        #expect(JoinPage.render(slug: "", host: "h") == .badSlug("the link has no invite in it"))
    }
}
