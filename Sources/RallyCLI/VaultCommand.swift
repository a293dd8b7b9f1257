import ArgumentParser
import Foundation
import RallyCore

struct VaultCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "vault",
        abstract: "End-to-end encrypted document vaults.",
        discussion:
            "Documents are sealed on this machine with a key of their own and stored on the relay as blobs; the relay never sees names, content or keys.",
        subcommands: [
            Create.self, List.self, Add.self, Ls.self, Get.self, Rm.self, VaultShareCommand.self,
            VaultPendingCommand.self,
        ])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a vault.")

        @OptionGroup var options: ClientOptions
        @Argument(help: "The vault's name (only readers of the vault see it).") var name: String

        func run() async throws {
            let client = try options.openClient()
            let vault = try await client.createVault(name: name)
            await client.disconnect()
            options.output.emit(vault) { "created vault \(vault.name.terminalSafe) (\(vault.id))" }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the vaults of this home.")

        @OptionGroup var options: ClientOptions

        func run() async throws {
            let client = try options.openClient()
            let vaults = try await client.vaultList()
            options.output.emit(vaults) {
                guard !vaults.isEmpty else { return "no vaults: create one with `rally vault create NAME`" }
                return vaults.map { vault in
                    let role = vault.isOwner ? "owner" : "nominee"
                    return "\(vault.name.terminalSafe)  \(vault.id)  \(role)  \(vault.documentCount) document(s)"
                }.joined(separator: "\n")
            }
        }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Seal files and add them to a vault.",
            discussion:
                "Each file is uploaded in 1 MiB segments; a dropped connection resumes where the relay's copy ends. A progress bar is shown on a terminal."
        )

        @OptionGroup var options: ClientOptions
        @Argument(help: "The vault's name or id.") var vault: String
        @Argument(help: "The files to add.") var files: [String]
        @Option(help: "The document's name (one file only; default: the file's name).") var name: String?

        func validate() throws {
            if name != nil && files.count != 1 { throw ValidationError("--name names one file; give one file") }
            if files.isEmpty { throw ValidationError("give at least one file") }
        }

        func run() async throws {
            let client = try options.openClient()
            var added: [VaultDocumentSummary] = []
            for file in files {
                let url = URL(fileURLWithPath: file)
                let bar = ProgressBar(label: url.lastPathComponent, enabled: !options.json)
                let document = try await client.addDocument(
                    to: vault, file: url, name: name, progress: { bar.update($0) })
                bar.finish()
                added.append(document)
                if !options.json {
                    Output.write("added \(document.name.terminalSafe) (\(document.id), \(document.size) bytes)")
                }
            }
            await client.disconnect()
            if options.json { options.output.emit(added) { "" } }
        }
    }

    struct Ls: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List a vault's documents.")

        @OptionGroup var options: ClientOptions
        @Argument(help: "The vault's name or id.") var vault: String

        func run() async throws {
            let client = try options.openClient()
            let documents = try await client.documents(in: vault)
            await client.disconnect()
            options.output.emit(documents) {
                guard !documents.isEmpty else { return "the vault is empty: add files with `rally vault add`" }
                return documents.map { "\($0.name.terminalSafe)  \($0.id)  \($0.size) bytes" }
                    .joined(separator: "\n")
            }
        }
    }

    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Download, check and save a document.",
            discussion:
                "Every segment is authenticated and the whole checked against the owner's record before the file is written (through FILE.part)."
        )

        @OptionGroup var options: ClientOptions
        @Argument(help: "The vault's name or id.") var vault: String
        @Argument(help: "The document's name or id.") var document: String
        @Option(name: .shortAndLong, help: "Where to write it (default: the document's name, here).") var output:
            String?

        func run() async throws {
            let client = try options.openClient()
            let target = URL(fileURLWithPath: output ?? Self.safeFileName(document))
            let bar = ProgressBar(label: target.lastPathComponent, enabled: !options.json)
            let fetched = try await client.fetchDocument(
                document, from: vault, to: target, progress: { bar.update($0) })
            bar.finish()
            await client.disconnect()
            options.output.emit(SavedDocument(document: fetched, path: target.path)) {
                "saved \(fetched.name.terminalSafe) to \(target.path.terminalSafe) (\(fetched.size) bytes)"
            }
        }

        /// A name from the vault used as a file name here: its last path
        /// component only, so a hostile name cannot write elsewhere.
        static func safeFileName(_ name: String) -> String {
            let last = name.split(separator: "/").last.map(String.init) ?? ""
            return last.isEmpty || last == "." || last == ".." ? "document" : last
        }
    }

    struct Rm: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove a document from a vault.")

        @OptionGroup var options: ClientOptions
        @Argument(help: "The vault's name or id.") var vault: String
        @Argument(help: "The document's name or id.") var document: String

        func run() async throws {
            let client = try options.openClient()
            let removed = try await client.removeDocument(document, from: vault)
            await client.disconnect()
            options.output.emit(removed) { "removed \(removed.name.terminalSafe) (\(removed.id))" }
        }
    }
}

struct SavedDocument: Encodable {
    var document: VaultDocumentSummary
    var path: String
}

/// A one-line progress bar on stderr, drawn only on a terminal and at most
/// once per percent.
///
/// `@unchecked Sendable`: the only mutable state, `lastPercent`, is read
/// and written only while `lock` is held; `label` and `enabled` are
/// immutable.
final class ProgressBar: @unchecked Sendable {
    private let label: String
    private let enabled: Bool
    private let lock = NSLock()
    private var lastPercent = -1

    init(label: String, enabled: Bool) {
        self.label = TerminalText.escaped(label)
        self.enabled = enabled && isatty(STDERR_FILENO) == 1
    }

    func update(_ progress: TransferProgress) {
        guard enabled, progress.bytesTotal > 0 else { return }
        let percent = Int(progress.bytesDone * 100 / progress.bytesTotal)
        let changed = lock.withLock {
            guard percent != lastPercent else { return false }
            lastPercent = percent
            return true
        }
        guard changed else { return }
        let width = 30
        let filled = width * percent / 100
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
        FileHandle.standardError.write(Data("\r\(label) [\(bar)] \(percent)%".utf8))
    }

    func finish() {
        guard enabled, lock.withLock({ lastPercent >= 0 }) else { return }
        FileHandle.standardError.write(Data("\n".utf8))
    }
}
