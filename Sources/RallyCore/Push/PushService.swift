import Foundation
import RallyWire

/// This identity's push target on the relay (ADR 0020): the URL the relay
/// calls when an envelope that asks for a push reaches this inbox. The
/// relay sends it nothing of the envelope; the app's push service wakes
/// the device, which reads its inbox.
struct PushService: Sendable {
    let context: ClientContext

    /// Registers (or replaces) the target; returns the URL as the relay
    /// stored it.
    func register(_ url: URL) async throws(RallyClientError) -> URL {
        var target = WirePushTarget()
        target.url = url.absoluteString
        let body = FrameCodec.encode(target)
        return try await withLink { link throws(RelayClientError) in
            try Self.url(
                try await link.send("PUT", Self.path, body: body, signing: .identity, what: "push register"))
        }
    }

    /// The registered target, or nil when there is none.
    func target() async throws(RallyClientError) -> URL? {
        try await withLink { link throws(RelayClientError) in
            let reply = try await link.send("GET", Self.path, signing: .identity, what: "push status")
            if reply.status == 404 { return nil }
            return try Self.url(reply)
        }
    }

    /// Removes the target; false when none was registered.
    func unregister() async throws(RallyClientError) -> Bool {
        try await withLink { link throws(RelayClientError) in
            let reply = try await link.send("DELETE", Self.path, signing: .identity, what: "push unregister")
            switch reply.status {
            case 200: return true
            case 404: return false
            default: throw reply.failure()
            }
        }
    }

    static let path = "/v1/push"

    private static func url(_ reply: HTTPRelayReply) throws(RelayClientError) -> URL {
        let target = try reply.decode("push target") { data throws(FrameDecodingError) in
            try FrameCodec.decode(WirePushTarget.self, from: data, limit: HTTPRelayLink.maxResponseBytes)
        }
        guard let url = URL(string: target.url) else {
            throw .protocolViolation("the relay answered a push target that is not a URL")
        }
        return url
    }

    private func withLink<T>(
        _ body: (HTTPRelayLink) async throws(RelayClientError) -> T
    ) async throws(RallyClientError) -> T {
        try await HTTPRelayLink.using(context.relayURL, identity: context.identity) { link throws(RallyClientError) in
            do throws(RelayClientError) {
                return try await body(link)
            } catch {
                throw .relay(error)
            }
        }
    }
}
