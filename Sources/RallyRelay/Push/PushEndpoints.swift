import Foundation
import Hummingbird
import RallyCrypto
import RallyWire

/// The push API (ADR 0020), each request signed by the inbox's identity:
/// `PUT /v1/push` registers (or replaces) its target from a `PushTarget`,
/// `GET /v1/push` answers it, `DELETE /v1/push` removes it.
enum PushEndpoints {
    static let maxBodyBytes = 4096

    static func addRoutes(to router: Router<RelayRequestContext>, services: RelayServices) {
        router.put("/v1/push") { request, context in
            await HTTPEndpoints.respond(services) { () async throws(RelayFailure) -> Data in
                let body = try await HTTPEndpoints.readBody(request, limit: maxBodyBytes)
                let inbox = try HTTPEndpoints.authenticate(
                    request, body: body, topic: topic, services: services, what: "registering a push target")
                try services.checkPublishRate(ip: context.remoteIP, identity: inbox, topic: topic)
                let target = try HTTPEndpoints.decode(body) { data throws(FrameDecodingError) in
                    try FrameCodec.decode(WirePushTarget.self, from: data, limit: maxBodyBytes)
                }
                let url = try PushTargetPolicy.validate(target.url, limits: services.limits.push)
                try await run(services) { try await services.push.register(inbox: inbox.rawValue, url: url) }
                return answer(url)
            }
        }
        router.get("/v1/push") { request, context in
            await HTTPEndpoints.respond(services) { () async throws(RelayFailure) -> Data in
                let inbox = try HTTPEndpoints.authenticate(
                    request, body: Data(), topic: topic, services: services, what: "reading the push target")
                let url = try await run(services) { try await services.push.target(inbox: inbox.rawValue) }
                guard let url else { throw RelayFailure(.notFound, "no push target is registered for this inbox") }
                return answer(url)
            }
        }
        router.delete("/v1/push") { request, context in
            await HTTPEndpoints.respond(services) { () async throws(RelayFailure) -> Data in
                let inbox = try HTTPEndpoints.authenticate(
                    request, body: Data(), topic: topic, services: services, what: "removing the push target")
                let removed = try await run(services) { try await services.push.unregister(inbox: inbox.rawValue) }
                guard removed else { throw RelayFailure(.notFound, "no push target is registered for this inbox") }
                return Data()
            }
        }
    }

    /// The target as the relay stored it, the answer of PUT and GET.
    private static func answer(_ url: URL) -> Data {
        var target = WirePushTarget()
        target.url = url.absoluteString
        return FrameCodec.encode(target)
    }

    /// What the signature's nonce is scoped to and refusals name.
    static let topic = "push"

    private static func run<T: Sendable>(
        _ services: RelayServices, _ body: () async throws -> T
    ) async throws(RelayFailure) -> T {
        do {
            return try await body()
        } catch {
            services.logger.error("the push target store failed", metadata: ["error": "\(error)"])
            throw RelayFailure(.internal, "could not store the push target")
        }
    }
}

/// Which URLs the relay agrees to call. A registration must not turn the
/// relay into a way into its own network: `https` only, no credentials in
/// the URL, and no loopback, private or link-local IP literal, unless the
/// limits allow them (tests, local development). A host name that
/// resolves to such an address is the operator's to block (ADR 0020).
enum PushTargetPolicy {
    static func validate(_ text: String, limits: PushLimits) throws(RelayFailure) -> URL {
        func refuse(_ why: String) -> RelayFailure {
            RelayFailure(.invalidRequest, "push target \(why)", topic: PushEndpoints.topic)
        }
        guard !text.isEmpty else { throw refuse("is empty") }
        guard text.utf8.count <= limits.maxTargetURLBytes else {
            throw refuse("is longer than \(limits.maxTargetURLBytes) bytes")
        }
        guard let components = URLComponents(string: text), let url = components.url,
            let scheme = components.scheme?.lowercased(), let host = components.host?.lowercased(), !host.isEmpty
        else { throw refuse("is not an absolute URL") }
        guard scheme == "https" || (scheme == "http" && limits.allowsInsecureTargets) else {
            throw refuse(limits.allowsInsecureTargets ? "must be http or https" : "must be an https URL")
        }
        guard components.user == nil, components.password == nil else { throw refuse("must not carry credentials") }
        guard components.fragment == nil else { throw refuse("must not have a fragment") }
        if !limits.allowsPrivateTargets, isInternal(host) {
            throw refuse("must not point at a loopback, private or link-local address")
        }
        return url
    }

    /// Loopback, private, link-local, unspecified and shared (CGNAT)
    /// addresses, written as IP literals, and `localhost`.
    static func isInternal(_ host: String) -> Bool {
        if host == "localhost" || host.hasSuffix(".localhost") { return true }
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        if let v4 = ipv4(bare) {
            let (a, b) = (v4[0], v4[1])
            return a == 0 || a == 10 || a == 127 || (a == 169 && b == 254) || (a == 172 && (16...31).contains(b))
                || (a == 192 && b == 168) || (a == 100 && (64...127).contains(b))
        }
        guard bare.contains(":") else { return false }
        let lower = bare.lowercased()
        if lower == "::1" || lower == "::" { return true }
        if let mapped = lower.split(separator: ":").last.map(String.init), lower.hasPrefix("::ffff:"),
            ipv4(mapped) != nil
        {
            return isInternal(mapped)
        }
        // fc00::/7 (unique local) and fe80::/10 (link-local).
        guard let first = lower.split(separator: ":", omittingEmptySubsequences: false).first,
            let word = UInt16(first, radix: 16), !first.isEmpty
        else { return false }
        return word & 0xFE00 == 0xFC00 || word & 0xFFC0 == 0xFE80
    }

    private static func ipv4(_ text: String) -> [Int]? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        let octets = parts.compactMap { part -> Int? in
            guard !part.isEmpty, part.count <= 3, part.allSatisfy(\.isASCII), let value = Int(part),
                (0...255).contains(value)
            else { return nil }
            return value
        }
        return octets.count == 4 ? octets : nil
    }
}
