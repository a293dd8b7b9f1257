extension WireErrorCode {
    /// The stable snake_case name of a code, for logs, metrics labels and
    /// `--json` output. Unknown codes from a newer relay keep their number.
    public var name: String {
        switch self {
        case .unspecified: "unspecified"
        case .malformedFrame: "malformed_frame"
        case .frameTooLarge: "frame_too_large"
        case .notAuthenticated: "not_authenticated"
        case .authenticationFailed: "authentication_failed"
        case .authenticationTimeout: "authentication_timeout"
        case .forbidden: "forbidden"
        case .rateLimited: "rate_limited"
        case .payloadTooLarge: "payload_too_large"
        case .invalidTopic: "invalid_topic"
        case .notFound: "not_found"
        case .invalidSignature: "invalid_signature"
        case .slowConsumer: "slow_consumer"
        case .tooManySubscriptions: "too_many_subscriptions"
        case .shuttingDown: "shutting_down"
        case .internal: "internal"
        case .invalidRequest: "invalid_request"
        case .conflict: "conflict"
        case .quotaExceeded: "quota_exceeded"
        case .accessRevoked: "access_revoked"
        case .tooManyConnections: "too_many_connections"
        case .idleTimeout: "idle_timeout"
        case .topicDeleted: "topic_deleted"
        case .UNRECOGNIZED(let value): "unrecognized_\(value)"
        }
    }
}
