import Foundation
import RallyCore
import RallyTestSupport
import Testing

@Suite("rally vault: the CLI and the hand-off between processes", .timeLimit(.minutes(3)))
struct VaultCLITests {
    struct VaultJSON: Decodable {
        let id: String
        let name: String
        let isOwner: Bool
        let documentCount: Int
    }

    struct DocumentJSON: Decodable {
        let id: String
        let name: String
        let size: Int64
    }

    struct PendingJSON: Decodable {
        let vaultID: String?
        let vaultName: String?
    }

    @Test("create, list, add, ls, get and rm with --json; unknown names fail with the error and exit 1")
    func wholeFlow() async throws {
        let relay = try await TestRelay.start()
        let homes = TemporaryDirectory("rally-vault-cli")
        defer { homes.remove() }
        func rally(_ arguments: [String]) async throws -> RallyBinary.Result {
            try await RallyBinary.run(
                arguments + ["--home", homes.path("owner").path, "--relay", relay.url.absoluteString])
        }
        #expect(try await rally(["id", "new", "--name", "Owner"]).status == 0)
        let created = try await rally(["vault", "create", "Papers", "--json"])
        let vault = try JSONDecoder().decode(VaultJSON.self, from: Data(created.stdout.utf8))
        #expect(vault.name == "Papers" && vault.isOwner)

        let file = homes.path("will.txt")
        try Data("my last will".utf8).write(to: file)
        let added = try await rally(["vault", "add", "Papers", file.path, "--json"])
        #expect(added.status == 0, "\(added.stderr)")
        let documents = try JSONDecoder().decode([DocumentJSON].self, from: Data(added.stdout.utf8))
        #expect(documents.map(\.name) == ["will.txt"] && documents[0].size == 12)

        let listed = try await rally(["vault", "ls", vault.id, "--json"])
        #expect(
            try JSONDecoder().decode([DocumentJSON].self, from: Data(listed.stdout.utf8)).map(\.id) == [documents[0].id]
        )
        let vaults = try await rally(["vault", "list", "--json"])
        #expect(try JSONDecoder().decode([VaultJSON].self, from: Data(vaults.stdout.utf8)).map(\.documentCount) == [1])

        let output = homes.path("copy.txt")
        let got = try await rally(["vault", "get", "Papers", "will.txt", "-o", output.path])
        #expect(got.status == 0, "\(got.stderr)")
        #expect(got.stdout.contains("saved will.txt to \(output.path) (12 bytes)"))
        #expect(try Data(contentsOf: output) == Data("my last will".utf8))

        let removed = try await rally(["vault", "rm", "Papers", "will.txt"])
        #expect(removed.status == 0 && removed.stdout.contains("removed will.txt"))
        let empty = try await rally(["vault", "ls", "Papers"])
        #expect(empty.stdout.contains("the vault is empty"))

        let unknown = try await rally(["vault", "ls", "Nope"])
        #expect(unknown.status != 0)
        #expect(unknown.stderr.contains("no vault named \"Nope\" in this home: see `rally vault list`"))
        let missingDocument = try await rally(["vault", "get", "Papers", "gone.txt"])
        #expect(missingDocument.status != 0)
        #expect(missingDocument.stderr.contains("vault \"Papers\" has no document \"gone.txt\""))
        await relay.stop()
    }

    @Test("rally vault share hands a vault over; of eight `rally vault pending` run at once exactly one gets it")
    func handoffAcrossProcesses() async throws {
        let relay = try await TestRelay.start()
        let homes = TemporaryDirectory("rally-vault-cli")
        defer { homes.remove() }
        let home = homes.path("owner").path
        func rally(_ arguments: [String]) async throws -> RallyBinary.Result {
            try await RallyBinary.run(arguments + ["--home", home, "--relay", relay.url.absoluteString])
        }
        #expect(try await rally(["id", "new", "--name", "Owner"]).status == 0)
        let created = try await rally(["vault", "create", "Deeds", "--json"])
        let vault = try JSONDecoder().decode(VaultJSON.self, from: Data(created.stdout.utf8))
        for round in 0..<5 {
            let shared = try await rally(["vault", "share", "Deeds"])
            #expect(shared.status == 0, "\(shared.stderr)")
            let results = try await withThrowingTaskGroup(of: RallyBinary.Result.self) { group in
                for _ in 0..<8 { group.addTask { try await rally(["vault", "pending", "--json"]) } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(results.allSatisfy { $0.status == 0 })
            let taken = try results.map { try JSONDecoder().decode(PendingJSON.self, from: Data($0.stdout.utf8)) }
                .filter { $0.vaultID != nil }
            #expect(taken.count == 1, "round \(round): \(taken.count) processes got the vault")
            #expect(taken.first?.vaultID == vault.id && taken.first?.vaultName == "Deeds")
        }
        await relay.stop()
    }
}
