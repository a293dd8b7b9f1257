import Foundation
import RallyTestSupport
import Testing

@testable import RallyQR

/// Runs the real `zbarimg` decoder (Debian package zbar-tools) on PNGs.
enum Zbar {
    static let missingMessage =
        "zbarimg not found on PATH or in /usr/bin: install zbar-tools (apt-get install zbar-tools)"

    static let executable: URL? = {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let directories = path.split(separator: ":").map(String.init) + ["/usr/bin", "/usr/local/bin"]
        return directories.map { URL(fileURLWithPath: $0).appendingPathComponent("zbarimg") }
            .first { FileManager.default.isExecutableFile(atPath: $0.path) }
    }()

    struct Output: Sendable {
        let status: Int32
        let stdout: String
        let stderr: String
    }

    /// Decodes each file in turn. The waits run on a thread of their own,
    /// off the Swift concurrency pool.
    static func decode(_ files: [URL]) async throws -> [Output] {
        let executable = try #require(Self.executable, Comment(rawValue: missingMessage))
        return try await onOwnThread { try files.map { try runBlocking(executable, file: $0) } }
    }

    private static func runBlocking(_ executable: URL, file: URL) throws -> Output {
        let process = try ChildProcess.launch(executable, ["--raw", "-q", file.path])
        // Both outputs are a few kilobytes at most, well under a pipe's
        // buffer, so reading them one after the other cannot deadlock.
        let stdout = process.standardOutput!.readDataToEndOfFile()
        let stderr = process.standardError!.readDataToEndOfFile()
        process.waitUntilExit()
        var text = String(decoding: stdout, as: UTF8.self)
        // --raw still ends each symbol's data with a newline.
        if text.hasSuffix("\n") { text.removeLast() }
        return Output(status: process.terminationStatus, stdout: text, stderr: String(decoding: stderr, as: UTF8.self))
    }
}

struct Payload: Sendable, CustomTestStringConvertible {
    let name: String
    let text: String
    var testDescription: String { "\(name) (\(text.utf8.count) bytes)" }

    /// A join link with a base64url slug of `slugLength` characters.
    static func joinURL(slugLength: Int, seed: UInt64) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        var generator = SeededGenerator(seed: seed)
        return "rally://join/" + String((0..<slugLength).map { _ in alphabet.randomElement(using: &generator)! })
    }

    /// Printable ASCII, so the decoder's text output compares byte for byte.
    static func randomASCII(count: Int, seed: UInt64) -> String {
        var generator = SeededGenerator(seed: seed)
        return String(
            (0..<count).map { _ in Character(Unicode.Scalar(UInt8.random(in: 0x20...0x7E, using: &generator))) })
    }

    static let all: [Payload] = [
        Payload(name: "short", text: "hello"),
        Payload(name: "url-300", text: joinURL(slugLength: 300 - 13, seed: 1)),
        Payload(name: "url-1500", text: joinURL(slugLength: 1500 - 13, seed: 2)),
        Payload(name: "random-1", text: randomASCII(count: 37, seed: 11)),
        Payload(name: "random-2", text: randomASCII(count: 211, seed: 12)),
        Payload(name: "random-3", text: randomASCII(count: 640, seed: 13)),
    ]
}

@Suite("zbarimg round trip")
struct ZbarDecodeTests {
    @Test func zbarimgIsInstalled() {
        #expect(Zbar.executable != nil, Comment(rawValue: Zbar.missingMessage))
    }

    @Test("decodes", arguments: Payload.all, QRErrorCorrection.allCases)
    func roundTrip(_ payload: Payload, correction: QRErrorCorrection) async throws {
        let bytes = payload.text.utf8.count
        guard bytes <= QRCode.byteCapacity(correction: correction) else {
            // 1500 bytes exceed what level H holds even at version 40.
            #expect(throws: QRError.tooLong(bytes: bytes, limit: QRCode.byteCapacity(correction: correction))) {
                try QRCode.encode(payload.text, correction: correction)
            }
            return
        }
        let directory = TemporaryDirectory("rally-qr")
        defer { directory.remove() }
        let file = directory.path("code.png")
        // Up to version 40 in a debug build: a CPU-heavy step (see offThePool).
        let code = try await offThePool {
            let code = try QRCode.encode(payload.text, correction: correction)
            try code.pngData(scale: 4).write(to: file)
            return code
        }
        let output = try #require(try await Zbar.decode([file]).first)
        #expect(output.status == 0, "zbarimg failed: \(output.stderr)")
        #expect(output.stdout == payload.text, "version \(code.version)-\(correction), mask \(code.mask)")
    }

    /// Fills every version to capacity at each level, which exercises every
    /// entry of the block and alignment tables against a real decoder.
    @Test("every version decodes", arguments: QRErrorCorrection.allCases)
    func everyVersion(_ correction: QRErrorCorrection) async throws {
        let directory = TemporaryDirectory("rally-qr-versions")
        defer { directory.remove() }
        var files: [URL] = []
        var texts: [String] = []
        // Seconds of CPU in a debug build (see offThePool).
        try await offThePool {
            for version in 1...40 {
                let capacity = QRCodewords.byteCapacity(version: version, correction: correction)
                let level = QRErrorCorrection.allCases.firstIndex(of: correction)!
                let text = Payload.randomASCII(count: capacity, seed: UInt64(100 * version + level))
                let code = try QRCode.encode(text, correction: correction)
                #expect(code.version == version)
                let file = directory.path("v\(version).png")
                try code.pngData(scale: 3, quietZone: 4).write(to: file)
                files.append(file)
                texts.append(text)
            }
        }
        let outputs = try await Zbar.decode(files)
        for (version, (output, text)) in zip(outputs, texts).enumerated() {
            #expect(output.status == 0, "version \(version + 1)-\(correction): \(output.stderr)")
            #expect(output.stdout == text, "version \(version + 1)-\(correction)")
        }
    }
}
