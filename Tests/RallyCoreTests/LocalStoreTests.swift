import CRallySQLite
import Foundation
import GRDB
import RallyCrypto
import RallyWire
import Synchronization
import Testing

@testable import RallyCore

@Suite("LocalStore")
struct LocalStoreTests {
    let topic = try! TopicName(validating: "inbox/mzuhvlpymk6xo3epygfy5h4oeaejofef")
    let otherTopic = try! TopicName(validating: "group/abc")

    // MARK: Identity

    @Test func aFreshStoreHasNoIdentityNoMessagesAndCursorZero() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let store = try temp.openStore()
        #expect(try store.loadIdentity() == nil)
        #expect(try store.messageCount() == 0)
        #expect(try store.messages().isEmpty)
        #expect(try store.cursor(for: topic) == 0)
        #expect(FileManager.default.fileExists(atPath: temp.home.appendingPathComponent(LocalStore.fileName).path))
    }

    /// A fresh home's schema is copied out of the WAL when the store is
    /// made, so its first transactions (a join, with the group's whole
    /// snapshot) write over the WAL's first frames instead of growing the
    /// file into blocks the file system must allocate and zero (ADR 0044).
    @Test func aFreshHomesFirstWriteStartsTheWALOverInsteadOfGrowingIt() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let store = try temp.openStore()
        let wal = temp.home.appendingPathComponent(LocalStore.fileName + "-wal").path
        func walBytes() throws -> Int { try FileManager.default.attributesOfItem(atPath: wal)[.size] as? Int ?? 0 }
        let afterCreation = try walBytes()
        // The schema alone fills many pages: otherwise there would be no
        // growth for the checkpoint to spare.
        #expect(afterCreation > 64 * 4096)
        try store.saveIdentity(Identity(displayName: "Ada", createdAt: Fixtures.created))
        #expect(try walBytes() == afterCreation)
    }

    /// With SQLite's memory statistics on, every allocation of every
    /// connection takes one process-wide mutex, which a home's threads (and
    /// an app's many homes) wait on (ADR 0042). They can only be turned off
    /// before SQLite starts, so a store does it before its first connection.
    /// In a process of its own, where this store is the first to open
    /// SQLite, whatever other tests opened before.
    @Test func aStoreTurnsSQLitesMemoryStatisticsOffBeforeItOpensSQLite() async {
        let temp = TemporaryHome()
        defer { temp.remove() }
        await #expect(processExitsWith: .success) { [home = temp.home as URL] in
            let store = try LocalStore(home: home)
            try store.saveIdentity(Identity(displayName: "Ada", createdAt: Fixtures.created))
            // SQLITE_OK: the store's call, before its connection, took
            // effect; had SQLite started first, this answers SQLITE_MISUSE
            // (21) and SQLite counts the bytes its connections hold.
            guard rally_sqlite_disable_memory_statistics() == 0, rally_sqlite_memory_used() == 0 else { exit(1) }
        }
    }

    @Test func theIdentityRoundTripsWithEqualKeys() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let identity = Identity(displayName: "Ada 🚀", createdAt: Fixtures.created)
        try temp.openStore().saveIdentity(identity)
        let loaded = try #require(try temp.openStore().loadIdentity())
        #expect(loaded.signingKey.rawRepresentation == identity.signingKey.rawRepresentation)
        #expect(loaded.agreementKey.rawRepresentation == identity.agreementKey.rawRepresentation)
        #expect(loaded.displayName == "Ada 🚀")
        #expect(loaded.createdAt == identity.createdAt)
        #expect(loaded.inboxID == identity.inboxID)
    }

    @Test func aSecondIdentityIsRefusedAndTheFirstIsKept() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let store = try temp.openStore()
        let first = Identity(displayName: "first", createdAt: Fixtures.created)
        try store.saveIdentity(first)
        #expect(throws: LocalStoreError.identityExists(temp.home.path)) {
            try store.saveIdentity(Identity(displayName: "second"))
        }
        #expect(throws: LocalStoreError.identityExists(temp.home.path)) { try store.saveIdentity(first) }
        #expect(try store.loadIdentity()?.inboxID == first.inboxID)
        #expect(try temp.openStore().loadIdentity()?.displayName == "first")
    }

    @Test func aSecretIsWrittenWithFullSyncAndOtherWritesWithNormal() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let store = try temp.openStore()
        // What each write's transaction runs with (2 FULL, 1 NORMAL).
        let mode = { (db: Database) in try Int.fetchOne(db, sql: "PRAGMA synchronous") }
        #expect(try store.write(mode) == 1)
        #expect(try LocalStore.write(store.queue, sync: .full, mode) == 2)
        #expect(try store.write(mode) == 1)

        // The home's own secret store writes with FULL: the statements its
        // writer runs for one secret, in order.
        let statements = WriterTrace(store)
        try store.secrets.setSecret(Data(repeating: 7, count: 32), named: .epochKey(group: "g", epoch: 1))
        let run = statements.run
        let full = try #require(run.firstIndex(of: "PRAGMA synchronous = FULL"))
        let insert = try #require(run.firstIndex { $0.contains("secret") && $0.uppercased().contains("INSERT") })
        let normal = try #require(run.lastIndex(of: "PRAGMA synchronous = NORMAL"))
        #expect(full < insert && insert < normal)
        #expect(try store.secret(.epochKey(group: "g", epoch: 1)) == Data(repeating: 7, count: 32))
    }

    @Test func severalSecretsAreWrittenInOneFullSyncTransaction() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let store = try temp.openStore()
        let statements = WriterTrace(store)
        let epochKey = SecretName.epochKey(group: "g", epoch: 2)
        let access = SecretName.topicAccess("t")
        try store.setSecrets([(epochKey, Data(repeating: 1, count: 32)), (access, Data(repeating: 2, count: 32))])
        let run = statements.run
        #expect(run.filter { $0 == "PRAGMA synchronous = FULL" }.count == 1)
        #expect(run.filter { $0.uppercased().hasPrefix("COMMIT") }.count == 1)
        let full = try #require(run.firstIndex(of: "PRAGMA synchronous = FULL"))
        let inserts = run.indices.filter { run[$0].contains("secret") && run[$0].uppercased().contains("INSERT") }
        let commit = try #require(run.firstIndex { $0.uppercased().hasPrefix("COMMIT") })
        #expect(inserts.count == 2 && inserts.allSatisfy { full < $0 && $0 < commit })
        #expect(try store.secret(epochKey) == Data(repeating: 1, count: 32))
        #expect(try store.secret(access) == Data(repeating: 2, count: 32))
    }

    @Test func aSecretStoreWithoutItsOwnBatchWriteStoresEachSecret() throws {
        let store = RecordingSecretStore()
        try store.setSecrets([(.topicAccess("a"), Data([1])), (.topicAccess("b"), Data([2]))])
        #expect(store.stored.withLock { $0 } == [.topicAccess("a"): Data([1]), .topicAccess("b"): Data([2])])
    }

    @Test func theStoreFileIsOwnerOnly() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        _ = try temp.openStore()
        let file = temp.home.appendingPathComponent(LocalStore.fileName).path
        let fileMode = try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? Int
        #expect(fileMode == 0o600)
        let dirMode = try FileManager.default.attributesOfItem(atPath: temp.home.path)[.posixPermissions] as? Int
        #expect(dirMode == 0o700)
    }

    // MARK: Cursors

    @Test func ingestAdvancesTheCursorAndItNeverGoesBackwards() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let store = try temp.openStore()
        let steps: [(ingested: UInt64, expected: UInt64)] = [(5, 5), (3, 5), (5, 5), (9, 9), (0, 9), (10, 10)]
        for step in steps {
            try store.ingest(topic: topic, seq: step.ingested, message: nil, now: Fixtures.created)
            #expect(try store.cursor(for: topic) == step.expected, "after ingesting \(step.ingested)")
        }
        #expect(try store.cursor(for: otherTopic) == 0)
        try store.ingest(topic: otherTopic, seq: 2, message: nil, now: Fixtures.created)
        #expect(try store.cursor(for: otherTopic) == 2)
        #expect(try store.cursor(for: topic) == 10)
        #expect(try temp.openStore().cursor(for: topic) == 10)
    }

    @Test func theLargestStorableSeqRoundTrips() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let store = try temp.openStore()
        try store.ingest(topic: topic, seq: UInt64(Int64.max), message: nil, now: Fixtures.created)
        #expect(try store.cursor(for: topic) == UInt64(Int64.max))
    }

    /// `seq` comes from the relay as a uint64; a value above Int64.max must
    /// not crash the client (it traps in `Int64(seq)` today).
    @Test func aSeqAboveInt64MaxDoesNotCrash() async {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let home = temp.home
        // Run in a child process: today this traps in `Int64(seq)`.
        await #expect(processExitsWith: .success) { [home = home as URL] in
            let store = try LocalStore(home: home)
            let topic = try TopicName(validating: "inbox/abc")
            do {
                try store.ingest(topic: topic, seq: UInt64(Int64.max) + 1, message: nil, now: Fixtures.created)
            } catch {
                // A typed refusal is fine; only a crash is not.
            }
        }
    }

    // MARK: Messages

    @Test func theSameMessageIDIsStoredOnce() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let store = try temp.openStore()
        let message = Fixtures.message(text: "first copy", seq: 1)
        #expect(try store.ingest(topic: topic, seq: 1, message: message, now: Fixtures.created))
        let copy = Fixtures.message(id: message.id, text: "second copy", seq: 2)
        #expect(try store.ingest(topic: topic, seq: 2, message: copy, now: Fixtures.created) == false)
        #expect(try store.saveOutgoing(copy) == false)
        #expect(try store.messageCount() == 1)
        #expect(try store.messages() == [message])
        // The cursor still moves past the duplicate.
        #expect(try store.cursor(for: topic) == 2)
    }

    @Test func messagesSurviveReopeningInOrder() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let peer = Identity(displayName: "peer").inboxID
        let sent = (1...3).map { index in
            Fixtures.message(conversation: "alice", text: "m\(index)", sender: peer, seq: UInt64(index))
        }
        let outgoing = StoredMessage(
            id: "0011", conversation: "alice", outgoing: true, sender: peer, senderName: "me",
            sentAt: Fixtures.created, receivedAt: Fixtures.created, topic: "inbox/x", seq: nil,
            contentType: "xmtp.org/text:1.0", encodedContent: Data([1, 2, 3]), displayText: "mine", isKnownType: true)
        do {
            let store = try temp.openStore()
            for (index, message) in sent.enumerated() {
                #expect(try store.ingest(topic: topic, seq: UInt64(index + 1), message: message, now: Fixtures.created))
            }
            #expect(try store.saveOutgoing(outgoing))
        }
        let reopened = try temp.openStore()
        #expect(try reopened.messageCount() == 4)
        #expect(try reopened.messages() == sent + [outgoing])
        #expect(try reopened.cursor(for: topic) == 3)
    }

    @Test func messagesFilterByConversationAndPosition() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let store = try temp.openStore()
        let a1 = Fixtures.message(conversation: "a", text: "a1")
        let b1 = Fixtures.message(conversation: "b", text: "b1")
        let a2 = Fixtures.message(conversation: "a", text: "a2")
        for (index, message) in [a1, b1, a2].enumerated() {
            try store.ingest(topic: topic, seq: UInt64(index + 1), message: message, now: Fixtures.created)
        }
        #expect(try store.messages(conversation: "a") == [a1, a2])
        #expect(try store.messages(conversation: "b") == [b1])
        #expect(try store.messages(conversation: "nobody").isEmpty)
        #expect(try store.messages(afterOrder: 1) == [b1, a2])
        #expect(try store.messages(conversation: "a", afterOrder: 1) == [a2])
        #expect(try store.messages(afterOrder: 3).isEmpty)
    }

    // MARK: Contacts

    @Test func contactsRoundTrip() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let store = try temp.openStore()
        let alice = Identity(displayName: "Alice", createdAt: Fixtures.created).publicIdentity
        #expect(try store.contact(alice.inboxID) == nil)
        try store.saveContact(alice)
        let loaded = try #require(try temp.openStore().contact(alice.inboxID))
        #expect(loaded == alice)
        #expect(loaded.inboxID == alice.inboxID)
        #expect(loaded.createdAt == alice.createdAt)
        #expect(loaded.agreementKey.rawRepresentation == alice.agreementKey.rawRepresentation)
        #expect(try store.contact(Identity(displayName: "x").inboxID) == nil)
    }

    @Test func aNewerBundleReplacesAContactAndAnOlderOneDoesNot() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let store = try temp.openStore()
        let identity = Identity(displayName: "Alice", createdAt: Fixtures.created)
        let key = identity.signingKey.publicKey
        let agreement = identity.agreementKey.publicKey
        try store.saveContact(identity.publicIdentity)
        let newer = PublicIdentity(
            signingKey: key, agreementKey: Identity(displayName: "other").agreementKey.publicKey,
            displayName: "Alice B.",
            createdAt: Fixtures.created.addingTimeInterval(60))
        try store.saveContact(newer)
        #expect(try store.contact(identity.inboxID) == newer)
        let older = PublicIdentity(
            signingKey: key, agreementKey: agreement, displayName: "Old Alice",
            createdAt: Fixtures.created.addingTimeInterval(-60))
        try store.saveContact(older)
        #expect(try store.contact(identity.inboxID) == newer)
    }

    // MARK: Bad homes

    @Test func aHomeThatIsAFileIsUnavailable() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        try Data("x".utf8).write(to: temp.home)
        let error = #expect(throws: LocalStoreError.self) { try LocalStore(home: temp.home) }
        guard case .unavailable(let path, let reason) = error else {
            Issue.record("expected .unavailable, got \(String(describing: error))")
            return
        }
        #expect(path == temp.home.path)
        #expect(!reason.isEmpty)
    }

    @Test func aDatabaseFileThatIsNotSQLiteIsUnavailable() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        try FileManager.default.createDirectory(at: temp.home, withIntermediateDirectories: true)
        try Data(repeating: 0x42, count: 4_096).write(to: temp.home.appendingPathComponent(LocalStore.fileName))
        let error = #expect(throws: LocalStoreError.self) { try LocalStore(home: temp.home) }
        guard case .unavailable(let path, let reason) = error else {
            Issue.record("expected .unavailable, got \(String(describing: error))")
            return
        }
        #expect(path == temp.home.path)
        #expect(!reason.isEmpty)
    }

    // MARK: Groups (ADR 0008)

    /// A created group owned by Olive, as its record after the create commit.
    func createdGroup() throws -> (owner: Identity, record: GroupRecord) {
        let owner = GroupTest.identity("Olive")
        var state = GroupState(groupID: GroupTest.groupID)
        _ = try state.apply(GroupTest.commit(GroupTest.create(), by: owner, on: state), signedBy: owner)
        let record = GroupRecord(
            groupID: GroupTest.groupID, topicID: GroupTest.topicID, state: state, status: .active,
            accessSecret: Data(repeating: 1, count: 32), epochLink: Data(repeating: 2, count: 32))
        return (owner, record)
    }

    /// A welcome's snapshot is stored as the bytes it came in: bytes with a
    /// field this version does not know, or in another order than it
    /// writes, still read back as the state the newcomer checked, and the
    /// next entry of the log stores the state in this version's encoding.
    @Test func aWelcomesSnapshotIsStoredAsReceivedAndReadsAsTheStateItDecodedTo() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let (owner, record) = try createdGroup()
        var wire = record.state.snapshot
        // Field 999, length-delimited: unknown to this version.
        try wire.merge(serializedBytes: Data([0xBA, 0x3E, 0x03, 0x61, 0x62, 0x63]))
        let received = FrameCodec.encode(wire)
        #expect(received != FrameCodec.encode(record.state.snapshot))
        let store = try temp.openStore()
        #expect(
            try store.ingestWelcome(
                record, snapshot: received, epochKey: (1, EpochKeys.newKey()), groupCursor: 1, inboxTopic: topic,
                inboxSeq: 1, message: welcomeMessage(from: owner), now: Fixtures.created))
        let stored = try store.read { db in
            try Data.fetchOne(
                db, sql: "SELECT snapshot FROM group_info WHERE group_id = ?", arguments: [record.groupID])
        }
        #expect(stored == received)
        // The state decoded from the welcome is kept with the bytes: the
        // group's first read here does not decode them again.
        #expect(store.groupStates.count == 1)
        #expect(try store.group(GroupTest.groupID)?.state == record.state)
        #expect(try temp.openStore().group(GroupTest.groupID)?.state == record.state)

        var next = record
        _ = try next.state.apply(
            GroupTest.commit(GroupTest.updateProfile("Climbers"), by: owner, on: next.state), signedBy: owner)
        try store.ingestGroupEntry(next, seq: 2, epochKey: nil, message: nil)
        let rewritten = try store.read { db in
            try Data.fetchOne(
                db, sql: "SELECT snapshot FROM group_info WHERE group_id = ?", arguments: [record.groupID])
        }
        #expect(rewritten == FrameCodec.encode(next.state.snapshot))
    }

    /// A welcome's keys came from the relay: they, the group and the inbox
    /// cursor are one commit, without the fsync a secret made here gets,
    /// since a power loss that drops it drops the cursor with it and the
    /// welcome is read again (ADR 0009, stop 49).
    @Test func aWelcomeItsKeysAndItsCursorAreOneCommitWithoutFullSync() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let (owner, record) = try createdGroup()
        let store = try temp.openStore()
        let statements = WriterTrace(store)
        let epochKey = EpochKeys.newKey()
        #expect(
            try store.ingestWelcome(
                record, snapshot: FrameCodec.encode(record.state.snapshot), epochKey: (1, epochKey), groupCursor: 1,
                inboxTopic: topic, inboxSeq: 1, message: welcomeMessage(from: owner), now: Fixtures.created))
        let run = statements.run
        #expect(run.filter { $0.uppercased().hasPrefix("COMMIT") }.count == 1)
        #expect(!run.contains("PRAGMA synchronous = FULL"))
        let begin = try #require(run.firstIndex { $0.uppercased().hasPrefix("BEGIN") })
        let commit = try #require(run.firstIndex { $0.uppercased().hasPrefix("COMMIT") })
        let secrets = run.indices.filter { run[$0].contains("INTO secret") }
        let group = try #require(
            run.firstIndex { $0.contains("INTO \"group_info\"") || $0.contains("INTO group_info") })
        // The group's cursor and the inbox's.
        let cursors = run.indices.filter { run[$0].contains("INTO cursor") }
        #expect(secrets.count == 2 && secrets.allSatisfy { begin < $0 && $0 < commit })
        #expect(begin < group && group < commit)
        #expect(cursors.count == 2 && cursors.allSatisfy { begin < $0 && $0 < commit })
        let reopened = try temp.openStore()
        #expect(
            try reopened.secret(.epochKey(group: record.groupID, epoch: 1)) == epochKey.withUnsafeBytes { Data($0) })
        #expect(try reopened.secret(.topicAccess(record.topicID)) == record.accessSecret)
        #expect(try reopened.group(record.groupID)?.state == record.state)
    }

    /// Keys kept outside the database (a Keychain) are stored there before
    /// the welcome's one NORMAL transaction, never in the database.
    @Test func aWelcomesKeysKeptElsewhereAreStoredBeforeItsRecords() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let (owner, record) = try createdGroup()
        let keychain = RecordingSecretStore()
        let store = try LocalStore(home: temp.home, secrets: keychain)
        let statements = WriterTrace(store)
        let keysWhenRecordsWent = Mutex<Int?>(nil)
        store.queue.writeWithoutTransaction { db in
            db.add(
                transactionObserver: CommitWatcher {
                    let keys = keychain.stored.withLock { $0.count }
                    keysWhenRecordsWent.withLock { $0 = keys }
                }, extent: .databaseLifetime)
        }
        let epochKey = EpochKeys.newKey()
        #expect(
            try store.ingestWelcome(
                record, snapshot: FrameCodec.encode(record.state.snapshot), epochKey: (1, epochKey), groupCursor: 1,
                inboxTopic: topic, inboxSeq: 1, message: welcomeMessage(from: owner), now: Fixtures.created))
        let run = statements.run
        #expect(run.filter { $0.uppercased().hasPrefix("COMMIT") }.count == 1)
        #expect(!run.contains("PRAGMA synchronous = FULL"))
        #expect(!run.contains { $0.contains("INTO secret") })
        #expect(keysWhenRecordsWent.withLock { $0 } == 2)
        #expect(
            keychain.stored.withLock { $0[.epochKey(group: record.groupID, epoch: 1)] }
                == epochKey.withUnsafeBytes { Data($0) })
    }

    /// Calls `committed` when a transaction that changed something commits.
    private final class CommitWatcher: TransactionObserver {
        let committed: @Sendable () -> Void
        init(_ committed: @escaping @Sendable () -> Void) { self.committed = committed }
        func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { true }
        func databaseDidChange(with event: DatabaseEvent) {}
        func databaseWillCommit() throws { committed() }
        func databaseDidCommit(_ db: Database) {}
        func databaseDidRollback(_ db: Database) {}
    }

    private func welcomeMessage(from owner: Identity) -> StoredMessage {
        StoredMessage(
            id: "w1", conversation: owner.inboxID.rawValue, outgoing: false, sender: owner.inboxID,
            senderName: "Olive", sentAt: Fixtures.created, receivedAt: Fixtures.created, topic: topic.rawValue, seq: 1,
            contentType: GroupWelcomeCodec.contentType.description, encodedContent: Data(), displayText: "welcome",
            isKnownType: true)
    }

    /// v11-welcome-copies: welcomes stored before it kept the group's keys
    /// and state; afterwards each keeps what it shows. Other messages, and
    /// a welcome that does not decode, stay as they were.
    @Test func welcomesStoredWithTheirKeysAreRewrittenWithout() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let (owner, record) = try createdGroup()
        var welcome = WireGroupWelcome()
        welcome.groupID = record.groupID
        welcome.topicID = record.topicID
        welcome.snapshot = FrameCodec.encode(record.state.snapshot)
        welcome.epochKey = Data(repeating: 9, count: 32)
        welcome.topicAccessSecret = Data(repeating: 8, count: 32)
        welcome.inviteSeed = Data(repeating: 7, count: 32)
        func message(_ id: String, _ content: WireEncodedContent, type: ContentTypeID) -> StoredMessage {
            StoredMessage(
                id: id, conversation: owner.inboxID.rawValue, outgoing: false, sender: owner.inboxID,
                senderName: "Olive", sentAt: Fixtures.created, receivedAt: Fixtures.created, topic: "inbox/me",
                seq: 1, contentType: type.description, encodedContent: FrameCodec.encode(content), displayText: "",
                isKnownType: true)
        }
        let full = ContentCompression.compressedIfUseful(try GroupWelcomeCodec().encode(welcome))
        var garbage = WireEncodedContent()
        garbage.type = GroupWelcomeCodec.contentType.wire
        garbage.content = Data([0xFF, 0xFF])
        let text = try TextCodec().encode("hello")
        let store = try temp.openStore()
        try store.write { db in
            _ = try MessageRecord.insert(message("w", full, type: GroupWelcomeCodec.contentType), db)
            _ = try MessageRecord.insert(message("g", garbage, type: GroupWelcomeCodec.contentType), db)
            _ = try MessageRecord.insert(message("t", text, type: TextCodec.contentType), db)
            try MessageRecord.keepLessOfWelcomes(db)
        }
        let stored = Dictionary(uniqueKeysWithValues: try store.messages().map { ($0.id, $0.encodedContent) })
        let keptBytes = try #require(stored["w"])
        let keptContent = try WireEncodedContent(serializedBytes: keptBytes)
        let kept = try #require(CodecRegistry.standard.decode(keptContent).value as? WireGroupWelcome)
        #expect(kept == GroupWelcomeCodec().keptCopy(of: welcome))
        #expect(kept.epochKey.isEmpty && kept.topicAccessSecret.isEmpty && kept.inviteSeed.isEmpty)
        #expect(stored["g"] == FrameCodec.encode(garbage))
        #expect(stored["t"] == FrameCodec.encode(text))
    }

    @Test func aGroupRecordKeepsItsAccessSecretEpochLinkControlSeqAndDivergence() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let (owner, record) = try createdGroup()
        let key = EpochKeys.newKey()
        try temp.openStore().saveNewGroup(record, epochKey: (1, key), cursor: 0, now: Fixtures.created)
        #expect(try temp.openStore().group(GroupTest.groupID) == record)

        var next = record
        _ = try next.state.apply(
            GroupTest.commit(GroupTest.updateProfile("Climbers"), by: owner, on: next.state), signedBy: owner)
        next.accessSecret = Data(repeating: 3, count: 32)
        next.epochLink = Data(repeating: 4, count: 32)
        next.lastControlSeq = 7
        next.divergence = "entry #7 belongs to another history"
        let nextKey = EpochKeys.newKey()
        let store = try temp.openStore()
        try store.ingestGroupEntry(next, seq: 7, epochKey: (2, nextKey), message: nil, accessSecretChanged: true)
        let loaded = try #require(try temp.openStore().group(GroupTest.groupID))
        #expect(loaded == next)
        #expect(loaded.state.transcript == next.state.transcript)
        #expect(
            try store.epochKey(group: GroupTest.groupID, epoch: 2)?.withUnsafeBytes { Data($0) }
                == nextKey.withUnsafeBytes { Data($0) })
        #expect(try store.cursor(for: next.topic) == 7)

        // An entry at or below the cursor (read first by another process) changes nothing.
        var stale = next
        stale.divergence = nil
        stale.lastControlSeq = 9
        #expect(try store.ingestGroupEntry(stale, seq: 7, epochKey: nil, message: nil) == false)
        #expect(try store.group(GroupTest.groupID) == next)

        // An entry that left the group as it was (a message) moves the
        // cursor without rewriting the group's row.
        var unwritten = next
        unwritten.lastControlSeq = 11
        try store.ingestGroupEntry(unwritten, recordChanged: false, seq: 8, epochKey: nil, message: nil)
        #expect(try store.group(GroupTest.groupID) == next)
        #expect(try store.cursor(for: next.topic) == 8)
    }

    @Test func theOutcomeOfOwnCommitsIsRecordedWithTheStateAfterThem() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let (_, record) = try createdGroup()
        let store = try temp.openStore()
        try store.saveNewGroup(record, epochKey: nil, cursor: 0, now: Fixtures.created)
        let applied = MessageSealing.newMessageID()
        let rejected = MessageSealing.newMessageID()
        try store.ingestGroupEntry(record, seq: 1, epochKey: nil, message: nil, ownCommit: (applied, nil))
        try store.ingestGroupEntry(
            record, seq: 2, epochKey: nil, message: nil,
            ownCommit: (rejected, GroupRejection.forkedHistory.description))
        let first = try #require(try store.ownCommit(applied))
        #expect(first.groupID == GroupTest.groupID)
        #expect(first.seq == 1)
        #expect(first.rejection == nil)
        #expect(first.snapshot == record.state.snapshot)
        let second = try #require(try temp.openStore().ownCommit(rejected))
        #expect(second.seq == 2)
        #expect(second.rejection == GroupRejection.forkedHistory.description)
        #expect(try store.ownCommit(MessageSealing.newMessageID()) == nil)

        // A rejected commit that left the group as it was still keeps the
        // state it was rejected in.
        let unchanged = MessageSealing.newMessageID()
        try store.ingestGroupEntry(
            record, recordChanged: false, seq: 3, epochKey: nil, message: nil,
            ownCommit: (unchanged, GroupRejection.forkedHistory.description))
        #expect(try store.ownCommit(unchanged)?.snapshot == record.state.snapshot)
    }

    @Test func aGroupAnotherProcessWroteIsReadAsWrittenNotAsDecodedBefore() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let (owner, record) = try createdGroup()
        let mine = try temp.openStore()
        try mine.saveNewGroup(record, epochKey: nil, cursor: 0, now: Fixtures.created)
        #expect(try mine.group(GroupTest.groupID) == record)
        #expect(mine.groupStates.count == 1)

        var next = record
        _ = try next.state.apply(
            GroupTest.commit(GroupTest.updateProfile("Climbers"), by: owner, on: next.state), signedBy: owner)
        // Another process on the same home (an app extension, `rally watch`).
        let other = try temp.openStore()
        try other.ingestGroupEntry(next, seq: 1, epochKey: nil, message: nil)

        #expect(try mine.group(GroupTest.groupID) == next)
        #expect(try mine.groups() == [next])
        #expect(try mine.findGroup("Climbers").map(\.groupID) == [GroupTest.groupID])
        #expect(try mine.findGroup(String(GroupTest.groupID.prefix(6))).map(\.groupID) == [GroupTest.groupID])
    }

    @Test func moreGroupsThanTheDecodedStatesKeptAreEachReadAsStored() throws {
        let temp = TemporaryHome()
        defer { temp.remove() }
        let store = try temp.openStore()
        let count = GroupStateCache.capacity + 3
        var stored: [GroupRecord] = []
        for index in 0..<count {
            let owner = GroupTest.identity("Owner \(index)")
            let groupID = String(format: "%032x", index + 1)
            var state = GroupState(groupID: groupID)
            _ = try state.apply(
                GroupTest.commit(GroupTest.create("Group \(index)"), by: owner, on: state), signedBy: owner)
            let record = GroupRecord(
                groupID: groupID, topicID: String(format: "%064x", index + 1), state: state,
                status: index % 3 == 0 ? .left : .active,
                accessSecret: Data(repeating: UInt8(index), count: 32), epochLink: Data())
            try store.saveNewGroup(
                record, epochKey: nil, cursor: 0, now: Fixtures.created.addingTimeInterval(Double(index)))
            stored.append(record)
        }
        for _ in 0..<2 {
            for record in stored.reversed() { #expect(try store.group(record.groupID) == record) }
            #expect(try store.groups() == stored)
        }
        #expect(store.groupStates.count <= GroupStateCache.capacity)
        #expect(try store.groupIDs(status: .active) == stored.filter { $0.status == .active }.map(\.groupID))
        #expect(try store.groupIDs(status: .left) == stored.filter { $0.status == .left }.map(\.groupID))
    }
}

/// A secret store outside the database (a Keychain's stand-in): what it
/// holds, by name.
private final class RecordingSecretStore: SecretStore {
    let stored = Mutex<[SecretName: Data]>([:])
    func secret(named name: SecretName) throws -> Data? { stored.withLock { $0[name] } }
    func setSecret(_ secret: Data, named name: SecretName) throws { stored.withLock { $0[name] = secret } }
    func removeSecret(named name: SecretName) throws { _ = stored.withLock { $0.removeValue(forKey: name) } }
}

/// The statements a store's writer connection runs from now on, in order.
private final class WriterTrace: Sendable {
    private let statements = Mutex<[String]>([])

    init(_ store: LocalStore) {
        store.queue.writeWithoutTransaction { db in
            db.trace { [self] event in statements.withLock { $0.append("\(event)") } }
        }
    }

    var run: [String] { statements.withLock { $0 } }
}
