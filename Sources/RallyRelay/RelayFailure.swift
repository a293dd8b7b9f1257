import Hummingbird
import RallyWire

/// A refusal the relay answers with: the typed `Error` frame on the
/// WebSocket, or an HTTP status with a `WireError` body on the fallback.
struct RelayFailure: Error, Sendable, Equatable {
    var code: WireErrorCode
    var message: String
    var topic: String = ""
    var retryAfterMilliseconds: UInt64 = 0
    /// For CONFLICT the topic's last control seq; for ACCESS_REVOKED the
    /// last seq the presented key may read.
    var seq: UInt64 = 0

    init(
        _ code: WireErrorCode, _ message: String, topic: String = "", retryAfterMilliseconds: UInt64 = 0,
        seq: UInt64 = 0
    ) {
        self.code = code
        self.message = message
        self.topic = topic
        self.retryAfterMilliseconds = retryAfterMilliseconds
        self.seq = seq
    }

    init(_ refusal: AppendRefusal, topic: String) {
        switch refusal {
        case .forbidden(let message): self.init(.forbidden, message, topic: topic)
        case .accessRevoked(let seq):
            self.init(
                .accessRevoked, "this access key was replaced; it may read up to seq \(seq)", topic: topic, seq: seq)
        case .conflict(let seq):
            self.init(.conflict, "the topic's last control entry is seq \(seq)", topic: topic, seq: seq)
        case .quotaExceeded(let message): self.init(.quotaExceeded, message, topic: topic)
        case .topicDeleted: self = .topicDeleted(topic)
        }
    }

    static func topicDeleted(_ topic: String) -> RelayFailure {
        RelayFailure(.topicDeleted, "this topic was deleted", topic: topic)
    }

    var wire: WireError {
        var error = WireError()
        error.code = code
        error.message = message
        error.topic = topic
        error.retryAfterMs = retryAfterMilliseconds
        error.seq = seq
        return error
    }

    /// Fatal errors close the WebSocket after they are sent (relay.proto).
    var isFatal: Bool {
        switch code {
        case .malformedFrame, .frameTooLarge, .authenticationTimeout, .shuttingDown, .tooManyConnections, .idleTimeout:
            true
        default: false
        }
    }

    var httpStatus: HTTPResponse.Status {
        switch code {
        case .malformedFrame, .invalidTopic, .invalidRequest, .invalidSignature, .unspecified, .UNRECOGNIZED:
            .badRequest
        case .notAuthenticated, .authenticationFailed, .authenticationTimeout: .unauthorized
        case .forbidden, .accessRevoked: .forbidden
        case .conflict: .conflict
        case .quotaExceeded: .contentTooLarge
        case .tooManyConnections: .tooManyRequests
        case .idleTimeout: .requestTimeout
        case .notFound: .notFound
        case .topicDeleted: .gone
        case .frameTooLarge, .payloadTooLarge: .contentTooLarge
        case .rateLimited: .tooManyRequests
        case .slowConsumer, .tooManySubscriptions: .tooManyRequests
        case .shuttingDown: .serviceUnavailable
        case .internal: .internalServerError
        }
    }
}
