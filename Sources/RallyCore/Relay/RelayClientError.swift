import RallyCrypto
import RallyWire

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

    public var description: String {
        switch self {
        case .unreachable(let url, let reason): "cannot reach the relay at \(url): \(reason)"
        case .disconnected(let reason): "lost the connection to the relay: \(reason)"
        case .refused(let code, let message): "relay refused (\(code.name)): \(message)"
        case .protocolViolation(let reason): "relay protocol error: \(reason)"
        case .timedOut(let what): "timed out waiting for the relay: \(what)"
        }
    }

    /// Whether retrying the same operation on a new connection can help.
    public var isTransient: Bool {
        switch self {
        case .unreachable, .disconnected, .timedOut: true
        case .refused(let code, _): code == .rateLimited || code == .shuttingDown || code == .slowConsumer
        case .protocolViolation: false
        }
    }
}
