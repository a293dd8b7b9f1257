import Crypto
import Foundation
import RallyCore
import RallyCrypto
import RallyRelay
import RallyTestSupport
import Testing

@Suite("Vaults: sealed documents on relay blobs", .timeLimit(.minutes(5)))
struct VaultTests {
    /// How much more a 200 MB transfer may peak at than a 2 MB one.
    static let transferMemoryMargin = 32 << 20

    /// Deterministic bytes that do not compress or repeat per segment.
    static func bytes(_ count: Int, seed: UInt64 = 1) -> Data {
        var generator = SeededGenerator(seed: seed)
        var data = Data(capacity: count + 8)
        while data.count < count {
            var word = generator.next()
            withUnsafeBytes(of: &word) { data.append(contentsOf: $0) }
        }
        return data.prefix(count)
    }

    static func write(_ data: Data, _ name: String, in directory: TemporaryDirectory) throws -> URL {
        let url = directory.path(name)
        try data.write(to: url)
        return url
    }

    @Test("create, add, ls, get and rm: the bytes come back exactly, a second process of the home sees the same vault")
    func wholeFlow() async throws {
        let relay = try await TestRelay.start()
        let homes = TemporaryDirectory("rally-vault")
        defer { homes.remove() }
        let owner = try await RallyClient.create(
            home: homes.path("owner"), relayURL: relay.url, displayName: "Owner", logger: TestLogger.quiet)
        let vault = try await owner.createVault(name: "Family Papers")
        #expect(vault.isOwner && vault.documentCount == 0)

        // Three segments, the last one short; and an empty document.
        let content = Self.bytes(2 * DocumentCipher.segmentBytes + 12_345)
        let file = try Self.write(content, "deed.pdf", in: homes)
        let empty = try Self.write(Data(), "empty.txt", in: homes)
        let progress = ProgressLog()
        let added = try await owner.addDocument(to: "Family Papers", file: file, progress: { progress.append($0) })
        #expect(added.name == "deed.pdf" && added.size == Int64(content.count))
        #expect(progress.values.last?.bytesDone == progress.values.last?.bytesTotal)
        #expect(progress.values.count == 3)
        _ = try await owner.addDocument(to: vault.id, file: empty, name: "Nothing")

        // Another process on the same home (an app extension) reads the log.
        let second = try RallyClient.open(home: homes.path("owner"), relayURL: relay.url, logger: TestLogger.quiet)
        let listed = try await second.documents(in: "Family Papers")
        #expect(listed.map(\.name) == ["deed.pdf", "Nothing"])

        let output = homes.path("out.pdf")
        _ = try await second.fetchDocument("deed.pdf", from: "Family Papers", to: output)
        #expect(try Data(contentsOf: output) == content)
        #expect(!FileManager.default.fileExists(atPath: output.path + ".part"))
        let emptyOut = homes.path("empty.out")
        _ = try await owner.fetchDocument("Nothing", from: "Family Papers", to: emptyOut)
        #expect(try Data(contentsOf: emptyOut).isEmpty)

        _ = try await owner.removeDocument("deed.pdf", from: "Family Papers")
        #expect(try await second.documents(in: vault.id).map(\.name) == ["Nothing"])
        await #expect(throws: RallyClientError.vault(.unknownDocument(vault: "Family Papers", document: "deed.pdf"))) {
            try await second.fetchDocument("deed.pdf", from: "Family Papers", to: homes.path("again"))
        }
        #expect(try await owner.vaultList().map(\.documentCount) == [1])
        await owner.disconnect()
        await second.disconnect()
        await relay.stop()
    }

    @Test("names are checked; an unknown vault or document says what to run; only the owner adds")
    func refusals() async throws {
        let relay = try await TestRelay.start()
        let homes = TemporaryDirectory("rally-vault")
        defer { homes.remove() }
        let owner = try await RallyClient.create(
            home: homes.path("owner"), relayURL: relay.url, displayName: "Owner", logger: TestLogger.quiet)
        await #expect(throws: RallyClientError.vault(.invalidName("a name cannot be empty"))) {
            try await owner.createVault(name: "  ")
        }
        await #expect(
            throws: RallyClientError.vault(.invalidName("a name cannot contain control or text-direction characters"))
        ) {
            try await owner.createVault(name: "bad\u{1b}[31m")
        }
        #expect(try await owner.vaultList().isEmpty)
        await #expect(throws: RallyClientError.vault(.unknownVault("Nope"))) {
            try await owner.documents(in: "Nope")
        }
        _ = try await owner.createVault(name: "Twin")
        _ = try await owner.createVault(name: "Twin")
        await #expect {
            try await owner.documents(in: "Twin")
        } throws: { error in
            guard case .vault(.ambiguousVault("Twin", let ids)) = error as? RallyClientError else { return false }
            return ids.count == 2
        }
        let missing = homes.path("missing.txt")
        let vault = try await owner.vaultList()[0]
        await #expect {
            try await owner.addDocument(to: vault.id, file: missing)
        } throws: { error in
            guard case .vault(.fileUnreadable(let path, _)) = error as? RallyClientError else { return false }
            return path == missing.path
        }
        #expect(try await owner.documents(in: vault.id).isEmpty)
        await owner.disconnect()
        await relay.stop()
    }

    @Test("the relay's files hold no vault name, document name or content: only sealed bytes")
    func relayLearnsNothing() async throws {
        let relay = try await TestRelay.start()
        let homes = TemporaryDirectory("rally-vault")
        defer { homes.remove() }
        let owner = try await RallyClient.create(
            home: homes.path("owner"), relayURL: relay.url, displayName: "Owner", logger: TestLogger.quiet)
        _ = try await owner.createVault(name: "QuiteSecretVaultName")
        let marker = Data("PLAINTEXT-MARKER-".utf8)
        var content = Data()
        for _ in 0..<2000 { content.append(marker) }
        let file = try Self.write(content, "VeryPrivateDocumentName.txt", in: homes)
        _ = try await owner.addDocument(to: "QuiteSecretVaultName", file: file)
        await owner.disconnect()
        await relay.relay.stop()
        var everything = Data()
        let enumerator = FileManager.default.enumerator(
            at: relay.directory.path("data"), includingPropertiesForKeys: nil)
        while let url = enumerator?.nextObject() as? URL {
            guard (try? url.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true else { continue }
            everything.append(try Data(contentsOf: url))
        }
        #expect(everything.count > content.count)
        for secret in ["QuiteSecretVaultName", "VeryPrivateDocumentName", "PLAINTEXT-MARKER"] {
            #expect(everything.range(of: Data(secret.utf8)) == nil, "the relay stores \(secret)")
        }
        relay.directory.remove()
    }

    @Test("an upload and a download cut halfway resume where they were and the document arrives intact")
    func cutTransfersResume() async throws {
        let network = try await FaultyNetwork.start()
        let owner = try await network.client("owner")
        _ = try await owner.createVault(name: "Cut")
        let content = Self.bytes(6 * DocumentCipher.segmentBytes, seed: 7)
        let file = try Self.write(content, "big.bin", in: network.homes)

        let uploadCut = HalfwayCut(network.proxy)
        _ = try await owner.addDocument(to: "Cut", file: file, progress: { uploadCut.observe($0) })
        try await uploadCut.waitUntilRestored()

        let output = network.homes.path("big.out")
        let downloadCut = HalfwayCut(network.proxy)
        _ = try await owner.fetchDocument("big.bin", from: "Cut", to: output, progress: { downloadCut.observe($0) })
        try await downloadCut.waitUntilRestored()
        #expect(try Data(contentsOf: output) == content)
        #expect(uploadCut.didCut && downloadCut.didCut)
        await owner.disconnect()
        await network.stop()
    }

    @Test(
        "a 200 MB document round-trips through `rally vault add` and `get` with peak memory far below its size, and not growing with it"
    )
    func largeDocument() async throws {
        let relay = try await TestRelay.start()
        let homes = TemporaryDirectory("rally-vault-large")
        defer { homes.remove() }
        /// Runs `rally` and returns its result and the peak resident memory
        /// it reported for its own address space.
        func rally(_ arguments: [String]) async throws -> (result: RallyBinary.Result, peak: Int) {
            let report = homes.path("peak-\(UUID().uuidString)")
            let result = try await RallyBinary.run(
                arguments + ["--home", homes.path("owner").path, "--relay", relay.url.absoluteString],
                environment: ["RALLY_PEAK_MEMORY_REPORT": report.path])
            let peak = (try? String(contentsOf: report, encoding: .utf8)).flatMap { Int($0) } ?? 0
            return (result, peak)
        }
        #expect(try await rally(["id", "new", "--name", "Owner"]).result.status == 0)
        #expect(try await rally(["vault", "create", "Large"]).result.status == 0)
        let size = 200 * 1_000_000
        let file = homes.path("large.bin")
        // Written in pieces: this test process holds 1 MiB at a time too.
        #expect(FileManager.default.createFile(atPath: file.path, contents: nil))
        let handle = try FileHandle(forWritingTo: file)
        var hasher = SHA256()
        var written = 0
        // One random MiB, stamped with its position so no two differ only
        // in place.
        let base = Self.bytes(1 << 20)
        var index: UInt64 = 0
        while written < size {
            var piece = base.prefix(min(1 << 20, size - written))
            withUnsafeBytes(of: &index) { piece.replaceSubrange(0..<8, with: $0) }
            index += 1
            hasher.update(data: piece)
            try handle.write(contentsOf: piece)
            written += piece.count
        }
        try handle.close()
        let digest = Data(hasher.finalize())

        let add = try await rally(["vault", "add", "Large", file.path])
        #expect(add.result.status == 0, "\(add.result.stderr)")
        let output = homes.path("large.out")
        let get = try await rally(["vault", "get", "Large", "large.bin", "-o", output.path])
        #expect(get.result.status == 0, "\(get.result.stderr)")
        let readBack = try FileHandle(forReadingFrom: output)
        var check = SHA256()
        while let chunk = try readBack.read(upToCount: 1 << 20), !chunk.isEmpty { check.update(data: chunk) }
        try readBack.close()
        #expect(Data(check.finalize()) == digest)

        // The same commands on a 2 MB document: the difference is what the
        // 198 MB more cost (the rest is the runtime's own footprint).
        let small = homes.path("small.bin")
        try Self.bytes(2_000_000).write(to: small)
        let smallAdd = try await rally(["vault", "add", "Large", small.path])
        let smallGet = try await rally(["vault", "get", "Large", "small.bin", "-o", homes.path("small.out").path])
        #expect(smallAdd.result.status == 0 && smallGet.result.status == 0)
        for (large, reference) in [(add, smallAdd), (get, smallGet)] {
            #expect(large.peak > 0 && large.peak < size / 2, "peaked at \(large.peak) bytes")
            #expect(
                large.peak - reference.peak < Self.transferMemoryMargin,
                "\(large.peak) bytes for 200 MB against \(reference.peak) for 2 MB")
        }
        await relay.stop()
    }
}

/// Progress reports, in order.
final class ProgressLog: @unchecked Sendable {
    // `@unchecked Sendable`: `stored` is only touched under `lock`.
    private let lock = NSLock()
    private var stored: [TransferProgress] = []
    func append(_ value: TransferProgress) { lock.withLock { stored.append(value) } }
    var values: [TransferProgress] { lock.withLock { stored } }
}

/// Cuts the network once a transfer is half done: every connection is
/// reset and new ones are refused until the client has tried again twice,
/// then traffic passes again.
final class HalfwayCut: @unchecked Sendable {
    // `@unchecked Sendable`: `cut` and `restore` are only touched under
    // `lock`; the proxy is Sendable.
    private let lock = NSLock()
    private let proxy: FaultProxy
    private var cut = false
    private var restore: Task<Void, any Error>?

    init(_ proxy: FaultProxy) { self.proxy = proxy }

    var didCut: Bool { lock.withLock { cut } }

    func observe(_ progress: TransferProgress) {
        let proxy = self.proxy
        lock.withLock {
            guard !cut, progress.bytesDone * 2 >= progress.bytesTotal, progress.bytesDone < progress.bytesTotal
            else { return }
            cut = true
            let accepted = proxy.acceptedCount
            proxy.setMode(.refuse)
            restore = Task {
                try await proxy.waitUntil(timeout: .seconds(30)) { $0.accepted >= accepted + 2 }
                proxy.setMode(.pass)
            }
        }
    }

    func waitUntilRestored() async throws {
        let task = lock.withLock { restore }
        try await task?.value
    }
}
