import RallyCrypto
public import RallyWire

/// What can go wrong talking to the relay, in terms a caller can act on.
public enum RelayClientError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The relay could not be reached at all.
    case unreachable(url: String, reason: String)
    /// The connection dropped; the operation may or may not have happened
    /// (publishes are safe to retry with the same idempotency key).
    case disconnected(String)
    /// The relay answered with a typed error frame.
    case refused(code: WireErrorCode, message: String)
    /// The relay sent something this client cannot parse.
    case protocolViolation(String)
    /// No answer within the timeout.
    case timedOut(String)
    /// A control publish lost the race: the topic's last control entry is
    /// `lastControlSeq`. Read up to it and rebuild.
    case conflict(topic: String, lastControlSeq: UInt64)
    /// The access key presented was replaced: it may read up to
    /// `lastReadableSeq` and can no longer publish.
    case accessRevoked(topic: String, lastReadableSeq: UInt64)
    /// A storage quota (the inbox's or the topic's) is full.
    case quotaExceeded(topic: String, message: String)
    /// Too many publishes (per connection, address or identity, or the
    /// relay's write queue is full): try again after `retryAfter`.
    case rateLimited(topic: String, retryAfter: Duration, message: String)

    public var description: String {
        switch self {
        case .unreachable(let url, let reason): "cannot reach the relay at \(url): \(reason)"
        case .disconnected(let reason): "lost the connection to the relay: \(reason)"
        case .refused(let code, let message): "relay refused (\(code.name)): \(message)"
        case .protocolViolation(let reason): "relay protocol error: \(reason)"
        case .timedOut(let what): "timed out waiting for the relay: \(what)"
        case .conflict(let topic, let seq): "relay refused (CONFLICT) on \(topic): the last control entry is seq \(seq)"
        case .accessRevoked(let topic, let seq):
            "relay refused (ACCESS_REVOKED) on \(topic): this access key may read up to seq \(seq)"
        case .quotaExceeded(let topic, let message): "relay refused (QUOTA_EXCEEDED) on \(topic): \(message)"
        case .rateLimited(_, let retryAfter, let message):
            "relay refused (RATE_LIMITED): \(message); retry after \(retryAfter)"
        }
    }

    /// The relay's error code, when the relay refused.
    public var code: WireErrorCode? {
        switch self {
        case .refused(let code, _): code
        case .conflict: .conflict
        case .accessRevoked: .accessRevoked
        case .quotaExceeded: .quotaExceeded
        case .rateLimited: .rateLimited
        case .unreachable, .disconnected, .protocolViolation, .timedOut: nil
        }
    }

    /// The typed error for an `Error` frame of the relay.
    public init(_ error: WireError) {
        switch error.code {
        case .conflict: self = .conflict(topic: error.topic, lastControlSeq: error.seq)
        case .accessRevoked: self = .accessRevoked(topic: error.topic, lastReadableSeq: error.seq)
        case .quotaExceeded: self = .quotaExceeded(topic: error.topic, message: error.message)
        case .rateLimited:
            self = .rateLimited(
                topic: error.topic, retryAfter: .milliseconds(Int64(clamping: error.retryAfterMs)),
                message: error.message)
        default: self = .refused(code: error.code, message: error.message)
        }
    }

    /// Whether retrying the same operation on a new connection can help.
    public var isTransient: Bool {
        switch self {
        case .unreachable, .disconnected, .timedOut: true
        case .refused(let code, _):
            // An authentication that came too late (a slow device, a
            // loaded relay) is worth a new connection; a wrong one is not.
            code == .rateLimited || code == .shuttingDown || code == .slowConsumer || code == .tooManyConnections
                || code == .idleTimeout || code == .authenticationTimeout
        case .rateLimited: true
        case .protocolViolation, .conflict, .accessRevoked, .quotaExceeded: false
        }
    }
}
