import Crypto
import Foundation
import GRDB
import RallyCrypto
import RallyTestSupport
import RallyWire
import Testing

@testable import RallyCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Keys at rest: owner-only homes and files, and the secret store.
@Suite("Keys at rest")
struct HomeSecurityTests {
    static func mode(_ path: String) throws -> Int {
        try #require(try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int)
    }

    @Test("Under umask 022 a fresh home is 0700 and every file in it (db, -wal, -shm) is 0600")
    func freshHomeUnderUmask022() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let previous = umask(0o022)
        defer { umask(previous) }
        let store = try temp.openStore()
        let identity = Identity(displayName: "Ada")
        try store.saveIdentity(identity)
        let topic = try TopicName(validating: "inbox/\(identity.inboxID.rawValue)")
        try store.ingest(topic: topic, seq: 1, message: Fixtures.message(seq: 1), now: Fixtures.created)
        try store.secrets.setSecret(Data([1, 2, 3]), named: .inviteSeed(group: "g"))
        // The store stays open, so SQLite's -wal and -shm files exist now.
        let files = try FileManager.default.contentsOfDirectory(atPath: temp.home.path).sorted()
        #expect(files.contains(LocalStore.fileName))
        #expect(files.contains(LocalStore.fileName + "-wal"))
        #expect(files.contains(LocalStore.fileName + "-shm"))
        for file in files {
            #expect(try Self.mode(temp.home.appendingPathComponent(file).path) == 0o600, "\(file)")
        }
        #expect(try Self.mode(temp.home.path) == 0o700)
        _ = store
    }

    @Test("A lax existing home and lax files in it are made owner-only")
    func laxHomeIsTightened() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        try FileManager.default.createDirectory(
            at: temp.home, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        try FileManager.default.setAttributes([.posixPermissions: 0o777], ofItemAtPath: temp.home.path)
        do {
            try temp.openStore().saveIdentity(Identity(displayName: "Ada"))
        }
        let database = temp.home.appendingPathComponent(LocalStore.fileName).path
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: database)
        let stray = temp.home.appendingPathComponent(LocalStore.fileName + "-shm").path
        if FileManager.default.fileExists(atPath: stray) {
            try FileManager.default.setAttributes([.posixPermissions: 0o666], ofItemAtPath: stray)
        }
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: temp.home.path)

        let store = try temp.openStore()
        #expect(try store.loadIdentity()?.displayName == "Ada")
        #expect(try Self.mode(temp.home.path) == 0o700)
        for file in try FileManager.default.contentsOfDirectory(atPath: temp.home.path) {
            #expect(try Self.mode(temp.home.appendingPathComponent(file).path) == 0o600, "\(file)")
        }
    }

    @Test(
        "A home owned by another user is refused with a clear message",
        .enabled(if: geteuid() == 0, "only root can give a directory to another user"))
    func foreignHomeIsRefused() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        try FileManager.default.createDirectory(at: temp.home, withIntermediateDirectories: true)
        #expect(chown(temp.home.path, 65534, 65534) == 0)
        let error = #expect(throws: LocalStoreError.self) { try temp.openStore() }
        guard case .unavailable(let path, let reason) = error else {
            Issue.record("expected .unavailable, got \(String(describing: error))")
            return
        }
        #expect(path == temp.home.path)
        #expect(reason.contains("belongs to user id 65534"))
        #expect(reason.contains("use another --home"))
        #expect(!FileManager.default.fileExists(atPath: temp.home.appendingPathComponent(LocalStore.fileName).path))
    }

    @Test("The default secret store round-trips, replaces and deletes secrets, and keeps the store's keys")
    func defaultSecretStoreRoundTrips() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let name = SecretName.epochKey(group: "g1", epoch: 7)
        #expect(name.rawValue == "epoch-key/g1/7")
        do {
            let store = try temp.openStore()
            #expect(try store.secrets.secret(named: name) == nil)
            try store.secrets.setSecret(Data([1]), named: name)
            try store.secrets.setSecret(Data([2, 3]), named: name)
            try store.secrets.setSecret(Data([9]), named: .topicAccess("group/abc"))
            let identity = Identity(displayName: "Ada")
            try store.saveIdentity(identity)
            #expect(
                try store.secrets.secret(named: .identitySigningKey(identity.inboxID.rawValue))
                    == identity.signingKey.rawRepresentation)
        }
        let reopened = try temp.openStore()
        #expect(try reopened.secrets.secret(named: name) == Data([2, 3]))
        #expect(try reopened.epochKey(group: "g1", epoch: 7) != nil)
        try reopened.secrets.removeSecret(named: name)
        try reopened.secrets.removeSecret(named: name)
        #expect(try reopened.secrets.secret(named: name) == nil)
        #expect(try reopened.secrets.secret(named: .topicAccess("group/abc")) == Data([9]))
        #expect(try reopened.loadIdentity()?.displayName == "Ada")
    }

    @Test("A custom secret store gets the client's keys; the database keeps none of them")
    func customSecretStoreIsUsedByTheClient() async throws {
        let relay = try await TestRelay.start()
        let temp = TemporaryHome()
        defer { temp.remove() }
        let keychain = MemorySecretStore()
        let client = try await RallyClient.create(
            home: temp.home, relayURL: relay.url, displayName: "Ada", logger: TestLogger.quiet, secrets: keychain)
        let inbox = client.inboxID.rawValue
        let group = try await client.createGroup(name: "Picnic")
        _ = try await client.sendGroupText("hello", to: group.groupID)
        await client.disconnect()

        let names = keychain.names
        #expect(names.contains(.identitySigningKey(inbox)))
        #expect(names.contains(.identityAgreementKey(inbox)))
        #expect(names.contains(.epochKey(group: group.groupID, epoch: group.state.epoch)))
        #expect(keychain.reads > 0)

        // The same home opens with the custom store…
        let again = try RallyClient.open(
            home: temp.home, relayURL: relay.url, logger: TestLogger.quiet, secrets: keychain)
        #expect(again.inboxID.rawValue == inbox)
        #expect(try again.store.epochKey(group: group.groupID, epoch: group.state.epoch) != nil)
        // …and not without it: the private keys are not in the database.
        #expect(throws: RallyClientError.self) {
            _ = try RallyClient.open(home: temp.home, relayURL: relay.url, logger: TestLogger.quiet)
        }
        await relay.stop()
    }

    @Test("A home that kept its secrets in the database hands them to a custom store")
    func secretsMoveToACustomStore() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let identity = Identity(displayName: "Ada")
        try temp.openStore().saveIdentity(identity)
        let keychain = MemorySecretStore()
        let moved = try LocalStore(home: temp.home, secrets: keychain)
        #expect(try moved.loadIdentity()?.inboxID == identity.inboxID)
        #expect(keychain.names.contains(.identitySigningKey(identity.inboxID.rawValue)))
        #expect(throws: LocalStoreError.self) { _ = try temp.openStore().loadIdentity() }
    }
}

/// A secret store in memory that records what the client does with it, as
/// a Keychain store would be used.
final class MemorySecretStore: SecretStore, @unchecked Sendable {
    // Every access holds the lock.
    private let lock = NSLock()
    private var secrets: [SecretName: Data] = [:]
    private var readCount = 0

    var names: Set<SecretName> { lock.withLock { Set(secrets.keys) } }
    var reads: Int { lock.withLock { readCount } }

    func secret(named name: SecretName) throws -> Data? {
        lock.withLock {
            readCount += 1
            return secrets[name]
        }
    }

    func setSecret(_ secret: Data, named name: SecretName) throws {
        lock.withLock { secrets[name] = secret }
    }

    func removeSecret(named name: SecretName) throws {
        _ = lock.withLock { secrets.removeValue(forKey: name) }
    }
}

@Suite("Keys at rest: homes of earlier versions")
struct LegacyHomeTests {
    @Test("A home that kept keys in its tables has them moved to the secret store and wiped from the tables")
    func legacySecretsMove() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        try FileManager.default.createDirectory(at: temp.home, withIntermediateDirectories: true)
        let path = temp.home.appendingPathComponent(LocalStore.fileName).path
        let identity = Identity(displayName: "Ada", createdAt: Fixtures.created)
        let epochKey = Data(repeating: 7, count: 32)
        let seed = Data(repeating: 9, count: 32)
        do {
            let legacy = try DatabaseQueue(path: path)
            try LocalStore.migrator.migrate(legacy, upTo: "v3-invites")
            try legacy.write { db in
                try db.execute(
                    sql: """
                        INSERT INTO identity (id, display_name, signing_key, agreement_key, created_at_ms)
                        VALUES (1, 'Ada', ?, ?, 1700000000123)
                        """,
                    arguments: [identity.signingKey.rawRepresentation, identity.agreementKey.rawRepresentation])
                try db.execute(
                    sql: "INSERT INTO epoch_key (group_id, epoch, key) VALUES ('g1', 3, ?)", arguments: [epochKey])
                try db.execute(sql: "INSERT INTO invite_seed (group_id, seed) VALUES ('g1', ?)", arguments: [seed])
            }
        }
        let store = try temp.openStore()
        let loaded = try #require(try store.loadIdentity())
        #expect(loaded.inboxID == identity.inboxID)
        #expect(loaded.signingKey.rawRepresentation == identity.signingKey.rawRepresentation)
        #expect(try store.epochKey(group: "g1", epoch: 3).map { $0.withUnsafeBytes { Data($0) } } == epochKey)
        #expect(try store.inviteSeeds().map(\.groupID) == ["g1"])
        #expect(try store.inviteSeed(group: "g1").map { $0.withUnsafeBytes { Data($0) } } == seed)
        let leftovers = try DatabaseQueue(path: path).read { db in
            [
                try Data.fetchOne(db, sql: "SELECT signing_key FROM identity"),
                try Data.fetchOne(db, sql: "SELECT agreement_key FROM identity"),
                try Data.fetchOne(db, sql: "SELECT key FROM epoch_key"),
                try Data.fetchOne(db, sql: "SELECT seed FROM invite_seed"),
            ]
        }
        #expect(leftovers == [Data(), Data(), Data(), Data()])
    }
}
