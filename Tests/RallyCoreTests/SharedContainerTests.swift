import Foundation
import RallyCore
import RallyTestSupport
import Testing

/// The App Group hand-off of the nominee invitation seed: a file-backed
/// shared container safe across processes, and the vault hand-off over it.
@Suite("SharedContainer")
struct SharedContainerTests {
    static let suite = "group.app.rally"

    static func container(_ temp: TemporaryDirectory) throws -> SharedContainer {
        try SharedContainer(suiteName: suite, directory: temp.path("shared"))
    }

    static func mode(_ url: URL) throws -> Int {
        try #require(try FileManager.default.attributesOfItem(atPath: url.path)[.posixPermissions] as? Int)
    }

    /// The reason of an `invalidSuiteName` error, or nil when `name` is valid.
    static func suiteNameProblem(_ name: String) -> String? {
        do {
            try SharedContainer.validate(suiteName: name)
            return nil
        } catch {
            guard case .invalidSuiteName(let rejected, let reason) = error else { return "wrong error: \(error)" }
            #expect(rejected == name)
            return reason
        }
    }

    // MARK: Suite names

    @Test(
        "A suite name of group. and a reverse-DNS app id is accepted",
        arguments: ["group.app.rally", "group.com.khandoba.securedocs", "group.Com.Example-App.v2"])
    func validSuiteName(_ name: String) throws {
        #expect(Self.suiteNameProblem(name) == nil)
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        #expect(try SharedContainer(suiteName: name, directory: temp.url).suiteName == name)
    }

    @Test("An empty suite name is refused")
    func emptySuiteName() {
        #expect(Self.suiteNameProblem("") == "it is empty")
    }

    @Test("A suite name without the group. prefix is refused", arguments: ["app.rally", "Group.app.rally", "groupapp"])
    func suiteNameWithoutPrefix(_ name: String) {
        #expect(Self.suiteNameProblem(name)?.contains("does not start with \"group.\"") == true)
    }

    @Test(
        "A suite name with characters outside letters, digits, - and . is refused",
        arguments: ["group.app/rally", "group.app rally", "group.ápp.rally", "group.app_rally.x", "group.app.rally\n"])
    func suiteNameWithBadCharacters(_ name: String) {
        #expect(Self.suiteNameProblem(name)?.contains("an app id holds only ASCII letters") == true)
    }

    @Test(
        "A suite name with an empty app id or an empty label is refused",
        arguments: ["group.", "group..app", "group.app..rally", "group.app.rally.", "group.."])
    func suiteNameWithEmptyLabel(_ name: String) {
        let problem = Self.suiteNameProblem(name)
        #expect(problem?.contains("empty") == true, "\(problem ?? "accepted")")
    }

    @Test("A suite name whose app id is a single label is refused")
    func suiteNameNotReverseDNS() {
        #expect(Self.suiteNameProblem("group.rally")?.contains("not reverse-DNS") == true)
    }

    @Test("A suite name longer than the limit is refused; one at the limit is accepted")
    func suiteNameTooLong() throws {
        let limit = SharedContainer.maximumSuiteNameLength
        let atLimit = "group.app." + String(repeating: "a", count: limit - "group.app.".count)
        #expect(atLimit.utf8.count == limit)
        #expect(Self.suiteNameProblem(atLimit) == nil)
        #expect(Self.suiteNameProblem(atLimit + "a")?.contains("more than \(limit)") == true)
        // Its files still fit a file name.
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let container = try SharedContainer(suiteName: atLimit, directory: temp.url)
        try container.set("v", forKey: "k")
        #expect(try container.value(forKey: "k") == "v")
    }

    @Test("The error for a bad suite name says what to use instead")
    func suiteNameErrorIsActionable() {
        let error = SharedContainerError.invalidSuiteName("app.rally", reason: "it does not start with \"group.\"")
        #expect(error.description.contains("use group.<app id>, such as group.app.rally"))
    }

    // MARK: Values

    @Test("A value set can be read back, replaced and removed with nil")
    func setGetRemove() throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let container = try Self.container(temp)
        #expect(try container.value(forKey: "a") == nil)
        try container.set("1", forKey: "a")
        try container.set("2", forKey: "b")
        #expect(try container.value(forKey: "a") == "1")
        try container.set("one", forKey: "a")
        #expect(try container.value(forKey: "a") == "one")
        try container.set(nil, forKey: "a")
        #expect(try container.value(forKey: "a") == nil)
        #expect(try container.value(forKey: "b") == "2")
        try container.setValues(["c": "3", "d": "4 \"quoted\" / ✓"])
        #expect(try container.values(forKeys: ["b", "c", "d", "e"]) == ["b": "2", "c": "3", "d": "4 \"quoted\" / ✓"])
    }

    @Test("The suite file is a JSON object of strings with sorted keys")
    func fileIsSortedJSON() throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let container = try Self.container(temp)
        try container.setValues(["b": "2", "a": "1"])
        #expect(container.fileURL == temp.path("shared").appendingPathComponent("group.app.rally.json"))
        #expect(try String(contentsOf: container.fileURL, encoding: .utf8) == #"{"a":"1","b":"2"}"#)
    }

    @Test("Values survive into a new instance of the container")
    func valuesSurviveNewInstance() throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        try Self.container(temp).setValues(["a": "1", "b": "2"])
        let again = try Self.container(temp)
        #expect(try again.values(forKeys: ["a", "b"]) == ["a": "1", "b": "2"])
    }

    @Test("Reading or taking from a container that was never written creates nothing")
    func readingCreatesNothing() throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let container = try Self.container(temp)
        #expect(try container.value(forKey: "a") == nil)
        #expect(try container.take(keys: ["a"]) == [:])
        #expect(try VaultHandoff(container: container).take() == nil)
        #expect(!FileManager.default.fileExists(atPath: temp.path("shared").path))
    }

    @Test("Writes replace the file atomically and leave no temporary files behind")
    func atomicWritesLeaveNoTemporaryFiles() throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let container = try Self.container(temp)
        for round in 0..<50 {
            try container.setValues(["round": "\(round)", "other": String(repeating: "x", count: round)])
            _ = try container.take(keys: ["other"])
        }
        #expect(try container.value(forKey: "round") == "49")
        let files = try FileManager.default.contentsOfDirectory(atPath: temp.path("shared").path).sorted()
        #expect(files == ["group.app.rally.json", "group.app.rally.lock"])
    }

    @Test("The directory is 0700, the suite and lock files are 0600")
    func ownerOnlyPermissions() throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let container = try Self.container(temp)
        try container.set("1", forKey: "a")
        #expect(try Self.mode(container.directory) == 0o700)
        #expect(try Self.mode(container.fileURL) == 0o600)
        #expect(try Self.mode(container.lockURL) == 0o600)
        // A lock file left laxer is tightened on the next operation.
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: container.lockURL.path)
        _ = try container.value(forKey: "a")
        #expect(try Self.mode(container.lockURL) == 0o600)
    }

    @Test("A corrupt file is a typed error for reads and writes, and stays as it was until reset")
    func corruptFileIsNotClobbered() throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let container = try Self.container(temp)
        try container.set("1", forKey: "a")
        for damage in [Data("{\"a\": 1}".utf8), Data("not json".utf8), Data(), Data("[\"a\"]".utf8)] {
            try damage.write(to: container.fileURL)
            let corrupt = SharedContainerError.corrupt(
                path: container.fileURL.path, reason: "not a JSON object of strings")
            #expect(throws: corrupt) { try container.value(forKey: "a") }
            #expect(throws: corrupt) { try container.set("2", forKey: "b") }
            #expect(throws: corrupt) { try container.take(keys: ["a"]) }
            #expect(try Data(contentsOf: container.fileURL) == damage)
        }
        let error = SharedContainerError.corrupt(path: container.fileURL.path, reason: "not a JSON object of strings")
        #expect(error.description.contains("Remove the file, or reset the container"))
        try container.reset()
        #expect(try container.value(forKey: "a") == nil)
        try container.set("2", forKey: "b")
        #expect(try container.value(forKey: "b") == "2")
    }

    @Test("A file over the size limit is a typed error and is left alone; so is a write that would exceed it")
    func oversizedFile() throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let container = try Self.container(temp)
        let limit = SharedContainer.maximumFileSize
        try container.set("1", forKey: "a")
        let big = Data(#"{"a":""#.utf8) + Data(repeating: UInt8(ascii: "x"), count: limit) + Data(#""}"#.utf8)
        try big.write(to: container.fileURL)
        #expect(throws: SharedContainerError.tooLarge(path: container.fileURL.path, bytes: big.count, limit: limit)) {
            try container.value(forKey: "a")
        }
        #expect(throws: SharedContainerError.tooLarge(path: container.fileURL.path, bytes: big.count, limit: limit)) {
            try container.take(keys: ["a"])
        }
        #expect(try Data(contentsOf: container.fileURL) == big)

        try container.reset()
        try container.set("1", forKey: "a")
        let before = try Data(contentsOf: container.fileURL)
        let error = #expect(throws: SharedContainerError.self) {
            try container.set(String(repeating: "y", count: limit), forKey: "b")
        }
        guard case .valuesTooLarge(let path, let bytes, let reported) = error else {
            Issue.record("expected valuesTooLarge, got \(String(describing: error))")
            return
        }
        #expect(path == container.fileURL.path && bytes > limit && reported == limit)
        #expect(try Data(contentsOf: container.fileURL) == before)
    }

    @Test("take returns the values exactly once and leaves other keys in place")
    func takeReturnsValuesOnce() throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let container = try Self.container(temp)
        try container.setValues(["a": "1", "b": "2", "keep": "3"])
        #expect(try container.take(keys: ["a", "b", "missing"]) == ["a": "1", "b": "2"])
        #expect(try container.take(keys: ["a", "b"]) == [:])
        #expect(try container.value(forKey: "keep") == "3")
    }

    @Test("take on an empty or never-written container returns nothing")
    func takeOnEmpty() throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let container = try Self.container(temp)
        #expect(try container.take(keys: ["a"]) == [:])
        try container.set("1", forKey: "a")
        try container.set(nil, forKey: "a")
        #expect(try container.take(keys: ["a"]) == [:])
    }

    // MARK: The vault hand-off

    @Test("The app offers a vault; the extension takes it once, under the seed's keys")
    func offerThenTakeOnce() throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let container = try Self.container(temp)
        let handoff = VaultHandoff(container: container)
        #expect(VaultHandoff.vaultIDKey == "pending_nominee_vault_id")
        #expect(VaultHandoff.vaultNameKey == "pending_nominee_vault_name")
        try handoff.offer(vaultID: "0C6F…-uuid", vaultName: "Family papers")
        #expect(try container.value(forKey: "pending_nominee_vault_id") == "0C6F…-uuid")
        #expect(try container.value(forKey: "pending_nominee_vault_name") == "Family papers")
        let expected = PendingVault(vaultID: "0C6F…-uuid", vaultName: "Family papers")
        #expect(try handoff.peek() == expected)
        #expect(try handoff.take() == expected)
        #expect(try handoff.take() == nil)
        #expect(try handoff.peek() == nil)
        #expect(try container.values(forKeys: [VaultHandoff.vaultIDKey, VaultHandoff.vaultNameKey]) == [:])
    }

    @Test("A name handed over without an id comes back with the id missing")
    func nameWithoutID() throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let container = try Self.container(temp)
        try container.set("Family papers", forKey: VaultHandoff.vaultNameKey)
        #expect(try VaultHandoff(container: container).take() == PendingVault(vaultID: nil, vaultName: "Family papers"))
    }

    @Test("A later offer replaces an earlier one")
    func laterOfferReplaces() throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let handoff = VaultHandoff(container: try Self.container(temp))
        try handoff.offer(vaultID: "1", vaultName: "One")
        try handoff.offer(vaultID: "2", vaultName: "Two")
        #expect(try handoff.take() == PendingVault(vaultID: "2", vaultName: "Two"))
    }

    @Test("The default container is <home>/shared/group.app.rally")
    func defaultContainer() throws {
        let home = URL(fileURLWithPath: "/tmp/home")
        let container = try SharedContainer.default(home: home)
        #expect(container.suiteName == "group.app.rally")
        #expect(container.fileURL.path == "/tmp/home/shared/group.app.rally.json")
        #expect(try SharedContainer.default(home: home, appID: "com.example.app").suiteName == "group.com.example.app")
        #expect(throws: SharedContainerError.self) { try SharedContainer.default(home: home, appID: "bad/id") }
    }

    struct Vault: Equatable {
        let id: String
        let name: String
    }

    static let vaults = [Vault(id: "a", name: "Alpha"), Vault(id: "b", name: "Beta"), Vault(id: "c", name: "Gamma")]

    @Test("The vault whose id was handed over is pre-selected")
    func preselectMatchingID() {
        let pending = PendingVault(vaultID: "b", vaultName: "Beta")
        #expect(VaultHandoff.preselect(pending: pending, vaults: Self.vaults, id: \.id) == Self.vaults[1])
    }

    @Test("An unknown id falls back to the first vault")
    func preselectUnknownID() {
        let pending = PendingVault(vaultID: "gone", vaultName: "Beta")
        #expect(VaultHandoff.preselect(pending: pending, vaults: Self.vaults, id: \.id) == Self.vaults[0])
    }

    @Test("A missing id, or nothing handed over, falls back to the first vault")
    func preselectMissingID() {
        let nameOnly = PendingVault(vaultID: nil, vaultName: "Beta")
        #expect(VaultHandoff.preselect(pending: nameOnly, vaults: Self.vaults, id: \.id) == Self.vaults[0])
        #expect(VaultHandoff.preselect(pending: nil, vaults: Self.vaults, id: \.id) == Self.vaults[0])
    }

    @Test("With no vaults nothing is pre-selected")
    func preselectNoVaults() {
        let pending = PendingVault(vaultID: "b", vaultName: "Beta")
        #expect(VaultHandoff.preselect(pending: pending, vaults: [Vault](), id: \.id) == nil)
    }

    // MARK: Concurrency

    /// What racing threads got, collected across threads.
    final class Outcomes: @unchecked Sendable {
        private let lock = NSLock()
        private var results: [Result<PendingVault?, SharedContainerError>] = []

        func append(_ result: Result<PendingVault?, SharedContainerError>) {
            lock.lock()
            defer { lock.unlock() }
            results.append(result)
        }

        var all: [Result<PendingVault?, SharedContainerError>] {
            lock.lock()
            defer { lock.unlock() }
            return results
        }
    }

    @Test("Of 16 takers racing on separate descriptors, exactly one gets the vault, in each of 200 rounds")
    func racingTakersGetTheVaultOnce() async throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let directory = temp.path("shared")
        let takers = 16
        let rounds = 200
        // Threads of their own, not the cooperative pool: takers block in flock.
        let failures: [String] = await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                var failures: [String] = []
                for round in 0..<rounds {
                    do {
                        let app = VaultHandoff(
                            container: try SharedContainer(suiteName: Self.suite, directory: directory))
                        try app.offer(vaultID: "vault-\(round)", vaultName: "Vault \(round)")
                    } catch {
                        failures.append("round \(round): offer failed: \(error)")
                        break
                    }
                    let takes = Outcomes()
                    let ready = DispatchGroup()
                    let done = DispatchGroup()
                    let start = DispatchSemaphore(value: 0)
                    for _ in 0..<takers {
                        ready.enter()
                        done.enter()
                        Thread.detachNewThread {
                            // Each taker has its own container, so its own lock descriptor.
                            let container = Result { () throws(SharedContainerError) in
                                try SharedContainer(suiteName: Self.suite, directory: directory)
                            }
                            ready.leave()
                            start.wait()
                            let result = container.flatMap { container in
                                Result { () throws(SharedContainerError) in
                                    try VaultHandoff(container: container).take()
                                }
                            }
                            takes.append(result)
                            done.leave()
                        }
                    }
                    ready.wait()
                    for _ in 0..<takers { start.signal() }
                    done.wait()
                    let results = takes.all
                    let got = results.compactMap { try? $0.get() }
                    let errors = results.compactMap { result -> SharedContainerError? in
                        if case .failure(let error) = result { error } else { nil }
                    }
                    let expected = PendingVault(vaultID: "vault-\(round)", vaultName: "Vault \(round)")
                    if !errors.isEmpty || got != [expected] {
                        let firstError = errors.first.map { "; first error: \($0)" } ?? ""
                        failures.append(
                            "round \(round): \(got.count) of \(takers) takers got the vault, \(errors.count) failed\(firstError)"
                        )
                    }
                }
                continuation.resume(returning: failures)
            }
        }
        #expect(failures.isEmpty, "\(failures.prefix(5))")
    }

    @Test("Readers racing a writer see whole offers, never an id from one and a name from another")
    func readersSeeWholeOffers() async throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let directory = temp.path("shared")
        let readers = 4
        let writes = 300
        let failures: [String] = await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                let seen = Outcomes()
                let started = DispatchGroup()
                let done = DispatchGroup()
                let finished = DispatchSemaphore(value: 0)
                for _ in 0..<readers {
                    started.enter()
                    done.enter()
                    Thread.detachNewThread {
                        let handoff = VaultHandoff(
                            container: try! SharedContainer(suiteName: Self.suite, directory: directory))
                        started.leave()
                        while finished.wait(timeout: .now()) == .timedOut {
                            seen.append(Result { () throws(SharedContainerError) in try handoff.peek() })
                        }
                        finished.signal()  // for the next reader
                        done.leave()
                    }
                }
                started.wait()
                var failures: [String] = []
                let app = VaultHandoff(container: try! SharedContainer(suiteName: Self.suite, directory: directory))
                for write in 0..<writes {
                    do {
                        try app.offer(vaultID: "vault-\(write)", vaultName: "Vault \(write)")
                    } catch {
                        failures.append("write \(write) failed: \(error)")
                        break
                    }
                }
                finished.signal()
                done.wait()
                if seen.all.isEmpty { failures.append("the readers read nothing") }
                for result in seen.all {
                    switch result {
                    case .success(nil): break
                    case .success(let pending?):
                        let number = pending.vaultID?.dropFirst("vault-".count) ?? "?"
                        if pending.vaultName != "Vault \(number)" { failures.append("read a mixed offer: \(pending)") }
                    case .failure(let error): failures.append("a read failed: \(error)")
                    }
                }
                continuation.resume(returning: failures)
            }
        }
        #expect(failures.isEmpty, "\(failures.prefix(5))")
    }
}
