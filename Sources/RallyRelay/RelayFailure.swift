import Hummingbird
import RallyWire

/// A refusal the relay answers with: the typed `Error` frame on the
/// WebSocket, or an HTTP status with a `WireError` body on the fallback.
struct RelayFailure: Error, Sendable, Equatable {
    var code: WireErrorCode
    var message: String
    var topic: String = ""
    var retryAfterMilliseconds: UInt64 = 0

    init(_ code: WireErrorCode, _ message: String, topic: String = "", retryAfterMilliseconds: UInt64 = 0) {
        self.code = code
        self.message = message
        self.topic = topic
        self.retryAfterMilliseconds = retryAfterMilliseconds
    }

    var wire: WireError {
        var error = WireError()
        error.code = code
        error.message = message
        error.topic = topic
        error.retryAfterMs = retryAfterMilliseconds
        return error
    }

    /// Fatal errors close the WebSocket after they are sent (relay.proto).
    var isFatal: Bool {
        switch code {
        case .malformedFrame, .frameTooLarge, .authenticationTimeout, .shuttingDown: true
        default: false
        }
    }

    var httpStatus: HTTPResponse.Status {
        switch code {
        case .malformedFrame, .invalidTopic, .invalidRequest, .invalidSignature, .unspecified, .UNRECOGNIZED:
            .badRequest
        case .notAuthenticated, .authenticationFailed, .authenticationTimeout: .unauthorized
        case .forbidden: .forbidden
        case .notFound: .notFound
        case .frameTooLarge, .payloadTooLarge: .contentTooLarge
        case .rateLimited: .tooManyRequests
        case .slowConsumer, .tooManySubscriptions: .tooManyRequests
        case .shuttingDown: .serviceUnavailable
        case .internal: .internalServerError
        case .conflict: .conflict
        case .quotaExceeded: .contentTooLarge
        case .accessRevoked: .forbidden
        case .tooManyConnections: .serviceUnavailable
        case .idleTimeout: .requestTimeout
        }
    }
}
