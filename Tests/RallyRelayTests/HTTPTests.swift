import Crypto
import Foundation
import RallyCrypto
import RallyTestSupport
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

    init(limits: RelayLimits = .default, clock: some RelayClock = SystemRelayClock()) async throws {
        directory = try TemporaryDirectory()
        relay = try await RunningRelay.start(
            configuration: RelayConfiguration(port: 0, dataDirectory: directory.url, limits: limits.onATestMachine),
            logger: .quiet, clock: clock)
    }

    func stop() async {
        await relay.stop()
        directory.remove()
    }

    var origin: String { "http://127.0.0.1:\(relay.port)" }

    /// A binding for a request to this relay (`path` may carry a query).
    func binding(_ method: String, _ path: String, body: Data = Data(), now: Date = Date()) -> HTTPRequestBinding {
        let parts = path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        return .fresh(
            origin: origin, method: method, path: String(parts[0]), query: parts.count > 1 ? String(parts[1]) : "",
            body: body, now: now)
    }

    /// Requests to capability topics get a `Rally-Topic-Proof` by the
    /// topic's founding test key unless the test passes headers itself.
    func http(
        _ method: String, _ path: String, body: Data? = nil, headers: [String: String] = [:]
    ) async throws -> (status: Int, body: Data, contentType: String?) {
        var headers = headers
        if headers.isEmpty, path.hasPrefix("/v1/topics/"), !path.hasPrefix("/v1/topics/inbox/") {
            let topic = String(path.dropFirst("/v1/topics/".count).prefix { $0 != "?" })
            if let access = foundingAccess(of: topic) {
                headers[HTTPAuthorization.topicProofHeader] = HTTPAuthorization.topicProofHeader(
                    access: access, binding: binding(method, path))
            }
        }
        return try await raw(method, path, body: body, headers: headers)
    }

    func raw(
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

    func publish(
        _ publish: WirePublish, access: TopicAccess? = nil, headers: [String: String] = [:]
    ) async throws -> (status: Int, body: Data) {
        let body = FrameCodec.encode(publish)
        var headers = headers
        if headers.isEmpty, let access = access ?? foundingAccess(of: publish.topic) {
            headers[HTTPAuthorization.topicProofHeader] = HTTPAuthorization.topicProofHeader(
                access: access, binding: binding("POST", "/v1/publish", body: body))
        }
        let result = try await raw("POST", "/v1/publish", body: body, headers: headers)
        return (result.status, result.body)
    }

    func authorization(_ identity: Identity, _ method: String, _ path: String, now: Date = Date()) -> String {
        HTTPAuthorization.header(identity: identity, binding: binding(method, path, now: now))
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
        while fixture.relay.server.services.hub.subscriberCount(topic: groupTopic) == 0 {
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

        let strangerHeader = fixture.authorization(stranger, "GET", path)
        let forbidden = try await fixture.http("GET", path, headers: ["Authorization": strangerHeader])
        #expect(forbidden.status == 403)
        #expect(forbidden.body.wireError?.code == .forbidden)

        let wrongPath = fixture.authorization(owner, "GET", "/v1/topics/other")
        #expect(try await fixture.http("GET", path, headers: ["Authorization": wrongPath]).status == 401)
        let stale = fixture.authorization(owner, "GET", path, now: Date().addingTimeInterval(-3600))
        #expect(try await fixture.http("GET", path, headers: ["Authorization": stale]).status == 401)

        let header = fixture.authorization(owner, "GET", path + "?after=0")
        let allowed = try await fixture.http("GET", path + "?after=0", headers: ["Authorization": header])
        #expect(allowed.status == 200)
        #expect(allowed.body.fetchResponse?.envelopes.map(\.payload) == [Data("for owner".utf8)])
        // The same signed request again is a replay.
        let replayed = try await fixture.http("GET", path + "?after=0", headers: ["Authorization": header])
        #expect(replayed.status == 401)
        #expect(replayed.body.wireError?.code == .authenticationFailed)
        // A changed query is not the request that was signed.
        let signed = fixture.authorization(owner, "GET", path + "?after=0")
        #expect(try await fixture.http("GET", path + "?after=1", headers: ["Authorization": signed]).status == 401)
        // Signed for another relay's origin.
        let elsewhere = HTTPAuthorization.header(
            identity: owner,
            binding: .fresh(
                origin: "https://relay.evil", method: "GET", path: path, query: "", body: Data(), now: Date()))
        #expect(try await fixture.http("GET", path, headers: ["Authorization": elsewhere]).status == 401)
        await fixture.stop()
    }

    @Test(
        "capability topics over HTTP: the topic proof header is bound to the body, used once, checked against the key chain"
    )
    func topicProofs() async throws {
        let fixture = try await RelayFixture()
        let first = testAccess(21)
        let second = testAccess(22)
        let topic = "other/" + first.foundedTopicID
        var create = publishBody(topic, "create")
        create.control = true
        #expect(try await fixture.publish(create, access: first).body.ack?.seq == 1)
        // No proof, or one by a key that is not the topic's.
        #expect(
            try await fixture.publish(publishBody(topic, "x"), headers: ["X": "y"]).body.wireError?.code == .forbidden)
        #expect(try await fixture.publish(publishBody(topic, "x"), access: second).status == 403)
        // A proof over another body is refused.
        let body = FrameCodec.encode(publishBody(topic, "signed"))
        let proof = HTTPAuthorization.topicProofHeader(
            access: first, binding: fixture.binding("POST", "/v1/publish", body: body))
        let changed = try await fixture.raw(
            "POST", "/v1/publish", body: FrameCodec.encode(publishBody(topic, "changed")),
            headers: [HTTPAuthorization.topicProofHeader: proof])
        #expect(changed.status == 401)
        #expect(
            try await fixture.raw(
                "POST", "/v1/publish", body: body, headers: [HTTPAuthorization.topicProofHeader: proof]
            )
            .body.ack?.seq == 2)
        // ...and only once.
        let replay = try await fixture.raw(
            "POST", "/v1/publish", body: body, headers: [HTTPAuthorization.topicProofHeader: proof])
        #expect(replay.status == 401)
        // Rotate: the old key reads up to the rotation, then ACCESS_REVOKED.
        var rotate = publishBody(topic, "rotate")
        rotate.control = true
        rotate.expectedControlSeq = 1
        rotate.rotateAccessKey = second.publicKey
        #expect(try await fixture.publish(rotate, access: first).body.ack?.seq == 3)
        var stale = publishBody(topic, "late")
        stale.control = true
        stale.expectedControlSeq = 3
        let revoked = try await fixture.publish(stale, access: first)
        #expect(revoked.status == 403)
        #expect(revoked.body.wireError?.code == .accessRevoked && revoked.body.wireError?.seq == 3)
        var conflicting = publishBody(topic, "late")
        conflicting.control = true
        conflicting.expectedControlSeq = 1
        let conflict = try await fixture.publish(conflicting, access: second)
        #expect(conflict.status == 409)
        #expect(conflict.body.wireError?.code == .conflict && conflict.body.wireError?.seq == 3)
        #expect(try await fixture.publish(publishBody(topic, "4"), access: second).body.ack?.seq == 4)
        func fetch(_ access: TopicAccess, after: UInt64) async throws -> (status: Int, body: Data, contentType: String?)
        {
            let path = "/v1/topics/\(topic)?after=\(after)"
            return try await fixture.raw(
                "GET", path,
                headers: [
                    HTTPAuthorization.topicProofHeader: HTTPAuthorization.topicProofHeader(
                        access: access, binding: fixture.binding("GET", path))
                ])
        }
        let old = try await fetch(first, after: 0)
        #expect(old.body.fetchResponse?.envelopes.map(\.seq) == [1, 2, 3])
        #expect(old.body.fetchResponse?.envelopes.map(\.control) == [true, false, true])
        let done = try await fetch(first, after: 3)
        #expect(done.status == 403 && done.body.wireError?.code == .accessRevoked)
        #expect(try await fetch(second, after: 0).body.fetchResponse?.envelopes.map(\.seq) == [1, 2, 3, 4])
        await fixture.stop()
    }

    @Test("HTTP publishes are rate limited per IP address: 429 with Retry-After")
    func httpRateLimit() async throws {
        var limits = RelayLimits.default
        limits.publishRatePerSecondPerIP = 0.001
        limits.publishBurstPerIP = 2
        let fixture = try await RelayFixture(limits: limits)
        let inbox = "inbox/" + Identity(displayName: "Ada").inboxID.rawValue
        #expect(try await fixture.publish(publishBody(inbox, "1")).status == 200)
        #expect(try await fixture.publish(publishBody(inbox, "2")).status == 200)
        var request = URLRequest(url: URL(string: fixture.relay.url.absoluteString + "/v1/publish")!)
        request.httpMethod = "POST"
        request.httpBody = FrameCodec.encode(publishBody(inbox, "3"))
        let (data, response) = try await URLSession.shared.data(for: request)
        let http = try #require(response as? HTTPURLResponse)
        #expect(http.statusCode == 429)
        #expect(Int(http.value(forHTTPHeaderField: "Retry-After") ?? "") ?? 0 >= 1)
        #expect(data.wireError?.code == .rateLimited)
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
        let body = FrameCodec.encode(publish)
        request.httpBody = body
        if let access = foundingAccess(of: publish.topic), let origin = RelayOrigin.of(url) {
            let binding = HTTPRequestBinding.fresh(
                origin: origin, method: "POST", path: "/v1/publish", query: "", body: body, now: Date())
            request.setValue(
                HTTPAuthorization.topicProofHeader(access: access, binding: binding),
                forHTTPHeaderField: HTTPAuthorization.topicProofHeader)
        }
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, data)
    }
}

@Suite("The web link's page", .timeLimit(.minutes(1)))
struct JoinPageTests {
    static let slug = "EAoQAQIDBAUGBwgJCgsMDQ4PEBI-_abcXYZ019"

    @Test("GET /join serves one static page: the slug stays in the fragment, the CSP allows only its script")
    func page() async throws {
        let fixture = try await RelayFixture()
        var request = URLRequest(url: URL(string: fixture.relay.url.absoluteString + "/join#\(Self.slug)")!)
        request.httpMethod = "GET"
        let (data, response) = try await URLSession.shared.data(for: request)
        let http = try #require(response as? HTTPURLResponse)
        let html = String(decoding: data, as: UTF8.self)
        #expect(http.statusCode == 200)
        #expect(http.value(forHTTPHeaderField: "Content-Type") == "text/html; charset=utf-8")
        #expect(http.value(forHTTPHeaderField: "Referrer-Policy") == "no-referrer")
        #expect(http.value(forHTTPHeaderField: "Cache-Control") == "no-store")
        let csp = try #require(http.value(forHTTPHeaderField: "Content-Security-Policy"))
        #expect(csp.hasPrefix("default-src 'none'"))
        for directive in ["frame-ancestors 'none'", "base-uri 'none'", "form-action 'none'", "script-src 'sha256-"] {
            #expect(csp.contains(directive))
        }
        // The CSP hash is the hash of the one inline script on the page.
        let script = try #require(
            html.components(separatedBy: "<script>").last?.components(separatedBy: "</script>").first)
        let digest = Data(SHA256.hash(data: Data(script.utf8))).base64EncodedString()
        #expect(csp.contains("script-src 'sha256-\(digest)'"))
        #expect(html.components(separatedBy: "<script").count == 2)
        #expect(!html.contains(Self.slug))
        #expect(html.contains("location.hash"))
        #expect(html.contains("\(WireLimits.maxInviteSlugCharacters)"))
        #expect(html.contains("rally://join/"))
        #expect(html.contains("rally join "))
        #expect(html.contains("never receives it"))
        await fixture.stop()
    }

    @Test(
        "The old /join/<slug> path gets the same static page and never echoes what it was given",
        arguments: [Self.slug, "%3Cscript%3Ealert(1)%3C%2Fscript%3E", "abc%22onload%3D", "slug.with.dots"])
    func oldPath(path: String) async throws {
        let fixture = try await RelayFixture()
        let result = try await fixture.http("GET", "/join/\(path)")
        #expect(result.status == 200)
        let body = String(decoding: result.body, as: UTF8.self)
        #expect(body == JoinPage.html)
        #expect(!body.contains(path))
        #expect(!body.contains("alert(1)"))
        await fixture.stop()
    }
}
