import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

/// Makes one push call. The relay's is ``WebhookDeliverer``; the tests
/// use it too, against a real local receiver.
protocol PushDeliverer: Sendable {
    func deliver(_ call: PushSchedule.Call, to target: URL) async -> PushSchedule.Outcome
    func shutdown() async
}

/// What every push says, whoever it is for: an APNs-shaped alert with
/// localization keys the app fills in, and nothing from the envelope (no
/// content, sender, topic or seq). The app's push service forwards it to
/// the device, which wakes and reads its inbox.
enum PushPayload {
    static let body = Data(
        #"{"aps":{"alert":{"title-loc-key":"RALLY_PUSH_TITLE","loc-key":"RALLY_PUSH_BODY"},"sound":"default","mutable-content":1}}"#
            .utf8)
    static let contentType = "application/json"
    /// The same for every retry of one notification, so a receiver can
    /// drop a call whose answer it sent but the relay never got.
    static let idHeader = "Rally-Push-Id"
    static let attemptHeader = "Rally-Push-Attempt"
}

/// Calls push targets over HTTP(S) with AsyncHTTPClient: no redirects
/// (a target cannot bounce the relay elsewhere), bounded time, and only
/// the status read from the answer. The client is made at the first call
/// and shut down with the relay, so a relay that never pushes holds none.
actor WebhookDeliverer: PushDeliverer {
    /// Most of an answer's body that is read (and dropped).
    static let maxAnswerBytes = 4096

    private let timeout: TimeAmount
    private var client: HTTPClient?
    private var isShutDown = false

    init(timeout: Duration) {
        self.timeout = .milliseconds(max(1, timeout.milliseconds))
    }

    private func currentClient() -> HTTPClient? {
        guard !isShutDown else { return nil }
        if let client { return client }
        var configuration = HTTPClient.Configuration()
        configuration.redirectConfiguration = .disallow
        configuration.timeout = .init(connect: timeout, read: timeout)
        configuration.decompression = .disabled
        let made = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        client = made
        return made
    }

    func deliver(_ call: PushSchedule.Call, to target: URL) async -> PushSchedule.Outcome {
        var request = HTTPClientRequest(url: target.absoluteString)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: PushPayload.contentType)
        request.headers.add(name: "apns-push-type", value: "alert")
        request.headers.add(name: "apns-priority", value: "10")
        request.headers.add(name: PushPayload.idHeader, value: call.notificationID)
        request.headers.add(name: PushPayload.attemptHeader, value: String(call.attempt))
        request.body = .bytes(ByteBuffer(bytes: PushPayload.body))
        guard let client = currentClient() else { return .failed(retryAfter: nil) }
        let response: HTTPClientResponse
        do {
            response = try await client.execute(request, timeout: timeout)
            _ = try? await response.body.collect(upTo: Self.maxAnswerBytes)
        } catch {
            return .failed(retryAfter: nil)
        }
        return Self.outcome(status: Int(response.status.code), retryAfter: response.headers.first(name: "Retry-After"))
    }

    /// How an answer's status reads: 2xx delivered, 404/410 gone, 429 and
    /// 5xx worth a retry (after `Retry-After` seconds when given), any other
    /// refused for good.
    nonisolated static func outcome(status: Int, retryAfter: String?) -> PushSchedule.Outcome {
        switch status {
        case 200..<300: return .delivered
        case 404, 410: return .gone
        case 429, 500..<600:
            let seconds = retryAfter.flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }.map { max(0, $0) }
            return .failed(retryAfter: seconds.map { .seconds($0) })
        default: return .refused
        }
    }

    func shutdown() async {
        isShutDown = true
        let open = client
        client = nil
        try? await open?.shutdown()
    }
}
