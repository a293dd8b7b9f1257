import Foundation
import RallyTestSupport
import Testing

/// The browser call client in headless Chromium with fake camera and
/// microphone, through a real relay (`rally relay`, the binary built with
/// the tests): Tests/Browser/call_browser_test.py drives two pages with
/// Selenium and cuts one page's signaling path with its own proxy. It
/// saves a screenshot of each badge state under
/// `.build/browser-artifacts/`. scripts/test.sh installs Chromium,
/// chromedriver and Selenium from Debian's packages on a fresh machine.
// Linux only: the browser comes from Debian's packages (scripts/test.sh
// installs it); on macOS the modules' `node --test` suites still run.
#if os(Linux)
    @Suite("Browser calls: two Chromium pages through a real relay", .timeLimit(.minutes(5)))
    struct BrowserCallTests {
        static let root = packageRoot()

        struct Summary: Decodable {
            let passed: [String]
            let failed: [String]
            let timeToMediaMs: Double?

            enum CodingKeys: String, CodingKey {
                case passed, failed
                case timeToMediaMs = "time_to_media_ms"
            }
        }

        @Test(
            "connect with media flowing; a 3 s cut shows the badge after 800 ms then clears; a 12 s cut shows 'Taking longer than usual…' and 'Leave call' then recovers; Leave goes home; the peer leaving during an outage is room gone, home"
        )
        func browserCalls() async throws {
            let tools = ["/usr/bin/python3", "/usr/bin/chromium", "/usr/bin/chromedriver"]
            let missing = tools.filter { !FileManager.default.isExecutableFile(atPath: $0) }
            try #require(
                missing.isEmpty,
                "missing \(missing.joined(separator: ", ")): run the tests with scripts/test.sh, which installs chromium, chromium-driver and python3-selenium"
            )
            let artifacts = Self.root.appendingPathComponent(".build/browser-artifacts")
            let result = try await runTool(
                "/usr/bin/python3",
                [
                    Self.root.appendingPathComponent("Tests/Browser/call_browser_test.py").path, "--rally",
                    RallyBinary.url.path, "--artifacts", artifacts.path,
                ])
            #expect(result.status == 0, "\(result.output)")
            let last = try #require(result.output.split(separator: "\n").last, "no output: \(result.output)")
            let summary = try JSONDecoder().decode(Summary.self, from: Data(last.utf8))
            #expect(summary.failed.isEmpty, "\(result.output)")
            #expect(
                Set(summary.passed).isSuperset(of: ["connect", "short_outage", "long_outage", "leave", "room_gone"]),
                "\(result.output)")
            for screenshot in ["connected", "reconnecting", "retrying", "home-after-leave", "home-after-room-gone"] {
                #expect(
                    FileManager.default.fileExists(atPath: artifacts.appendingPathComponent("\(screenshot).png").path),
                    "screenshot \(screenshot).png")
            }
        }
    }
#endif
