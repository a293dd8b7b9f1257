import Foundation
import RallyTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@Suite("Children the tests start do not outlive them", .timeLimit(.minutes(1)))
struct ChildProcessTests {
    struct Thrown: Error {}

    @Test("a relay started by a test that throws before stopping it is killed when its handle goes")
    func relayOfAThrowingTestIsKilled() async throws {
        let data = TemporaryDirectory("rally-child-process")
        defer { data.remove() }
        var pid: pid_t = 0
        func throwingTest() async throws {
            let relay = try await RelayProcess.start(dataDirectory: data.path("relay"))
            pid = relay.process.pid
            #expect(kill(pid, 0) == 0)
            throw Thrown()
        }
        await #expect(throws: Thrown.self) { try await throwingTest() }
        // Killed, not yet reaped: the pid is a zombie until waited for. Were
        // it still running, the bound below stops it gracefully (the relay
        // then exits with 0, not SIGKILL) so the test fails instead of
        // waiting forever.
        let child = pid
        let bound = Task {
            try await Task.sleep(for: .seconds(30))
            kill(child, SIGTERM)
        }
        defer { bound.cancel() }
        let raw = try await onOwnThread { () -> Int32 in
            var raw: Int32 = 0
            while waitpid(child, &raw, 0) == -1 && errno == EINTR {}
            return raw
        }
        #expect(raw & 0x7f == SIGKILL)
    }
}
