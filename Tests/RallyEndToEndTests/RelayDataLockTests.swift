import Foundation
import RallyTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A relay keeps its envelopes' index in memory (ADR 0029), so a second
/// relay process on the same data directory must not start.
@Suite("One relay per data directory", .timeLimit(.minutes(2)))
struct RelayDataLockTests {
    @Test(
        "a second rally relay on a data directory in use exits with 1, naming the file and what to do; once the first is SIGKILLed, one starts at once"
    )
    func secondRelayIsRefused() async throws {
        let data = TemporaryDirectory("rally-data-lock")
        defer { data.remove() }
        let directory = data.path("relay")
        let first = try await RelayProcess.start(dataDirectory: directory)
        let second = try await RallyBinary.run([
            "relay", "--port", "0", "--data", directory.path, "--log-level", "error",
        ])
        #expect(second.status == 1)
        let store = directory.appendingPathComponent("relay.sqlite").path
        #expect(
            second.stderr.contains(
                "another relay is using \(store): stop it, or give this relay a data directory of its own (--data)"),
            "\(second.stderr)")
        // The kernel drops the lock with the process, however it ends.
        await first.kill(signal: SIGKILL)
        let third = try await RelayProcess.start(dataDirectory: directory)
        await third.kill(signal: SIGTERM)
        #expect(third.terminationStatus == 0)
    }
}
