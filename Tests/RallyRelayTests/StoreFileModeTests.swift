import Foundation
import RallyWire
import Testing

@testable import RallyRelay

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

@Suite("Relay data directory modes")
struct StoreFileModeTests {
    static func mode(_ path: String) throws -> Int {
        try #require(try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int)
    }

    @Test(
        "Under umask 022 a new data directory and its segment directory are 0700, and the database, -wal, -shm and segments are 0600"
    )
    func ownerOnlyUnderUmask022() async throws {
        let parent = try TemporaryDirectory()
        defer { parent.remove() }
        let previous = umask(0o022)
        defer { umask(previous) }
        let data = parent.url.appendingPathComponent("data")
        let store = try SQLiteRelayStore(url: data.appendingPathComponent("relay.sqlite"))
        let request = PublishRequest(topic: "group/a", payload: Data("x".utf8), idempotencyKey: Data("k".utf8))
        _ = try await store.append([request], serverTimeMilliseconds: 1)
        let files = try FileManager.default.contentsOfDirectory(atPath: data.path)
        #expect(files.contains("relay.sqlite-wal"))
        #expect(files.contains("relay.sqlite-segments"))
        for file in files where file != "relay.sqlite-segments" {
            #expect(try Self.mode(data.appendingPathComponent(file).path) == 0o600, "\(file)")
        }
        let segments = data.appendingPathComponent("relay.sqlite-segments")
        #expect(try Self.mode(segments.path) == 0o700)
        let segmentFiles = try FileManager.default.contentsOfDirectory(atPath: segments.path)
        #expect(segmentFiles == ["00000000.segment"])
        for file in segmentFiles {
            #expect(try Self.mode(segments.appendingPathComponent(file).path) == 0o600, "\(file)")
        }
        #expect(try Self.mode(data.path) == 0o700)
        try await store.close()
    }

    @Test("An existing data directory of the relay's files alone is tightened; a shared one keeps its mode")
    func existingDirectories() async throws {
        let parent = try TemporaryDirectory()
        defer { parent.remove() }
        let own = parent.url.appendingPathComponent("own")
        let shared = parent.url.appendingPathComponent("shared")
        for directory in [own, shared] {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: directory.path)
            try Data().write(to: directory.appendingPathComponent("relay.sqlite"))
            try FileManager.default.setAttributes(
                [.posixPermissions: 0o644], ofItemAtPath: directory.appendingPathComponent("relay.sqlite").path)
        }
        try Data("notes".utf8).write(to: shared.appendingPathComponent("README"))
        for directory in [own, shared] {
            try await SQLiteRelayStore(url: directory.appendingPathComponent("relay.sqlite")).close()
            #expect(try Self.mode(directory.appendingPathComponent("relay.sqlite").path) == 0o600)
        }
        #expect(try Self.mode(own.path) == 0o700)
        #expect(try Self.mode(shared.path) == 0o755)
    }
}
