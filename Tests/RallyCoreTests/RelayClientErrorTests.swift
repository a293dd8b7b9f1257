import RallyCore
import RallyWire
import Testing

@Suite("Which relay errors are retried on a new connection")
struct RelayClientErrorTests {
    @Test(
        "codes about the moment (load, shutdown, a late authentication) are retried; codes about the request are not",
        arguments: [
            (WireErrorCode.authenticationTimeout, true),
            (.shuttingDown, true),
            (.slowConsumer, true),
            (.tooManyConnections, true),
            (.idleTimeout, true),
            (.rateLimited, true),
            (.authenticationFailed, false),
            (.notAuthenticated, false),
            (.forbidden, false),
            (.malformedFrame, false),
            (.frameTooLarge, false),
            (.payloadTooLarge, false),
            (.invalidSignature, false),
            (.invalidTopic, false),
            (.notFound, false),
            (.topicDeleted, false),
            (.conflict, false),
            (.accessRevoked, false),
            (.quotaExceeded, false),
        ])
    func transientByCode(code: WireErrorCode, retried: Bool) {
        var frame = WireError()
        frame.code = code
        frame.message = "from the relay"
        frame.retryAfterMs = 1000
        let error = RelayClientError(frame)
        #expect(error.code == code)
        #expect(error.isTransient == retried)
    }

    @Test("failures of the connection itself are retried; a relay speaking nonsense is not")
    func transientWithoutCode() {
        #expect(RelayClientError.unreachable(url: "ws://127.0.0.1:1", reason: "refused").isTransient)
        #expect(RelayClientError.disconnected("reset").isTransient)
        #expect(RelayClientError.timedOut("challenge").isTransient)
        #expect(!RelayClientError.protocolViolation("not a frame").isTransient)
    }
}
