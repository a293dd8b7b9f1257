public import Foundation
public import Logging
public import RallyRelay

/// A real relay in this process on a free loopback port, with its store in
/// a temporary directory.
public struct TestRelay: Sendable {
    public let relay: RunningRelay
    public let directory: TemporaryDirectory

    public var url: URL { relay.url }

    /// `publicURL`: where clients reach the relay, when that is not the
    /// relay itself (a proxy in front of it); `acceptsBindOrigins`: clients
    /// that reach it directly (``RunningRelay/boundURL``) are accepted too.
    /// `directory`: where its store lives (a restart reuses it); `clock`:
    /// the relay's time (a ``ManualRelayClock`` in tests of expiry and
    /// waits).
    /// The authentication deadline of test relays that keep the default
    /// (``RelayLimits/onATestMachine``).
    public static let testAuthTimeout: Duration = .seconds(120)

    public static func start(
        limits: RelayLimits = .default, publicURL: URL? = nil, acceptsBindOrigins: Bool = false, port: Int = 0,
        directory: TemporaryDirectory? = nil, clock: any RelayClock = SystemRelayClock()
    ) async throws -> TestRelay {
        let directory = directory ?? TemporaryDirectory("rally-relay")
        let limits = limits.onATestMachine
        var logger = Logger(label: "rally.test.relay")
        logger.logLevel = .warning
        let relay = try await RunningRelay.start(
            configuration: RelayConfiguration(
                port: port, dataDirectory: directory.path("data"), limits: limits, publicURL: publicURL,
                acceptsBindOrigins: acceptsBindOrigins),
            logger: logger, clock: clock)
        return TestRelay(relay: relay, directory: directory)
    }

    public func stop() async {
        await relay.stop()
        directory.remove()
    }

    /// Stops the relay (gracefully: its clients are told it is shutting
    /// down) and keeps its store for a restart.
    public func stopKeepingData() async {
        await relay.stop()
    }
}

public enum TestLogger {
    public static var quiet: Logger {
        PoolStallReporter.started
        var logger = Logger(label: "rally.test")
        logger.logLevel = .warning
        return logger
    }
}

extension RelayLimits {
    /// These limits for a relay under test: the default authentication
    /// deadline (10 s, for a phone) becomes ``TestRelay/testAuthTimeout``,
    /// since hundreds of clients of a whole test run on a loaded two-core
    /// machine have taken longer to authenticate. A test of the deadline
    /// sets its own, which is kept.
    public var onATestMachine: RelayLimits {
        var limits = self
        if limits.authTimeout == RelayLimits.default.authTimeout { limits.authTimeout = TestRelay.testAuthTimeout }
        return limits
    }
}
