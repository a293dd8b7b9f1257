public import Foundation
public import Logging
import PostgresNIO
public import RallyCrypto
public import RallyWire

enum PostgresStoreError: Error {
    /// A statement that always returns a row returned none.
    case noRow
}

/// The relay's store in PostgreSQL, shared by several relay nodes
/// (ADR 0021). The same guarantees as the SQLite store, across nodes:
/// appends to one topic serialize on a transaction-scoped advisory lock,
/// so seqs stay gap-free and strictly increasing and an idempotency key
/// is stored once whichever node each try reached; a commit returns only
/// after PostgreSQL made it durable. Every stored envelope is announced
/// with `NOTIFY` in its own transaction, so other nodes learn of it when,
/// and only if, it commits.
public final class PostgresRelayStore: RelayStore, PushTargetStore {
    /// The channel every node listens on; the payload is
    /// `<node> <seq> <topic>`.
    static let channel = "rally_envelopes"

    let client: PostgresClient
    /// This process's id in notifications: a node skips its own.
    let nodeID: String
    private let logger: Logger
    private let runTask: Task<Void, Never>

    public init(location: PostgresLocation, logger: Logger, maxConnections: Int = 16) async throws {
        try await Self.checkConnection(to: location, logger: logger)
        var configuration = PostgresClient.Configuration(
            host: location.host, port: location.port, username: location.username, password: location.password,
            database: location.database, tls: try location.clientTLS())
        configuration.options.maximumConnections = max(2, maxConnections)
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        self.client = client
        self.logger = logger
        self.nodeID = UUID().uuidString.lowercased()
        runTask = Task { await client.run() }
        do {
            try await Self.migrate(client, logger: logger)
        } catch {
            runTask.cancel()
            throw error
        }
    }

    /// One connection before the pool: the pool retries a connection that
    /// fails for as long as it is asked to, so a wrong password, TLS
    /// setting or host would keep the node waiting without a word.
    private static func checkConnection(to location: PostgresLocation, logger: Logger) async throws {
        let connection: PostgresConnection
        do {
            connection = try await PostgresConnection.connect(
                configuration: .init(
                    host: location.host, port: location.port, username: location.username,
                    password: location.password, database: location.database, tls: try location.connectionTLS()),
                id: 0, logger: logger)
        } catch let invalid as PostgresLocation.Invalid {
            throw invalid
        } catch {
            throw PostgresUnreachable(location, error)
        }
        try? await connection.close()
    }

    /// Creates the tables once, whichever nodes start at the same time.
    private static func migrate(_ client: PostgresClient, logger: Logger) async throws {
        try await transaction(client, logger: logger) { connection in
            // Any fixed number: the nodes' shared migration lock.
            try await connection.query("SELECT pg_advisory_xact_lock(72617001)", logger: logger)
            for statement in schema {
                try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
            }
        }
    }

    private static let schema = [
        "CREATE TABLE IF NOT EXISTS topics (name TEXT PRIMARY KEY, last_seq BIGINT NOT NULL, last_control_seq BIGINT NOT NULL DEFAULT 0, bytes BIGINT NOT NULL DEFAULT 0)",
        """
        CREATE TABLE IF NOT EXISTS envelopes (topic TEXT NOT NULL, seq BIGINT NOT NULL, server_time_ms BIGINT NOT NULL,
        payload BYTEA NOT NULL, should_push BOOLEAN NOT NULL, expires_at_ms BIGINT NOT NULL, idempotency_key BYTEA,
        control BOOLEAN NOT NULL DEFAULT false, retires_key BYTEA, PRIMARY KEY (topic, seq))
        """,
        "CREATE UNIQUE INDEX IF NOT EXISTS envelopes_idempotency ON envelopes (topic, idempotency_key)",
        "CREATE INDEX IF NOT EXISTS envelopes_expiry ON envelopes (expires_at_ms) WHERE expires_at_ms > 0",
        "CREATE INDEX IF NOT EXISTS envelopes_inbox_age ON envelopes (server_time_ms) WHERE topic LIKE 'inbox/%'",
        "CREATE TABLE IF NOT EXISTS topic_keys (topic TEXT NOT NULL, access_key BYTEA NOT NULL, valid_through BIGINT, PRIMARY KEY (topic, access_key))",
        "CREATE TABLE IF NOT EXISTS deleted_topics (topic TEXT PRIMARY KEY, deleted_at_ms BIGINT NOT NULL)",
        """
        CREATE TABLE IF NOT EXISTS key_bundles (inbox_id TEXT PRIMARY KEY, signing_key BYTEA NOT NULL,
        created_at_ms BIGINT NOT NULL, bundle BYTEA NOT NULL, signature BYTEA NOT NULL)
        """,
        "CREATE TABLE IF NOT EXISTS push_targets (inbox_id TEXT PRIMARY KEY, url TEXT NOT NULL, registered_at_ms BIGINT NOT NULL)",
    ]

    /// A transaction whose failure is the closure's own error (a refusal
    /// the caller tells apart), not PostgresNIO's wrapper around it.
    private func transaction<T: Sendable>(
        _ body: (PostgresConnection) async throws -> sending T
    ) async throws -> T {
        try await Self.transaction(client, logger: logger, body)
    }

    private static func transaction<T: Sendable>(
        _ client: PostgresClient, logger: Logger, _ body: (PostgresConnection) async throws -> sending T
    ) async throws -> T {
        do {
            return try await client.withTransaction(logger: logger, body)
        } catch let error as PostgresTransactionError {
            if let inner = error.closureError { throw inner }
            throw error
        }
    }

    // MARK: Envelopes

    public func append(
        _ batch: [PublishRequest], serverTimeMilliseconds: Int64
    ) async throws -> [Result<AppendResult, AppendRefusal>] {
        guard !batch.isEmpty else { return [] }
        let logger = logger
        let nodeID = nodeID
        return try await transaction { connection in
            // Every topic of the batch locked up front, in one order on
            // every node: two nodes' batches never wait on each other in a
            // cycle.
            try await Self.lock(Set(batch.map(\.topic)).sorted(), connection: connection, logger: logger)
            let readings = try await Self.read(batch, connection: connection, logger: logger)
            if let plan = BatchAppendPlan.plan(batch, readings: readings, serverTime: serverTimeMilliseconds) {
                try await Self.write(
                    plan, of: batch, serverTime: serverTimeMilliseconds, nodeID: nodeID, connection: connection,
                    logger: logger)
                return plan.results
            }
            // A key is founded or rotated: one publish at a time, each
            // reading what the ones before it wrote.
            var results: [Result<AppendResult, AppendRefusal>] = []
            results.reserveCapacity(batch.count)
            for request in batch {
                results.append(
                    try await Self.append(
                        request, serverTime: serverTimeMilliseconds, nodeID: nodeID, connection: connection,
                        logger: logger))
            }
            return results
        }
    }

    /// What the checks of every publish of `batch` need, in one round trip
    /// and one snapshot: a stored retry, the topic's head and the key's
    /// status, one row per publish in batch order.
    private static func read(
        _ batch: [PublishRequest], connection: PostgresConnection, logger: Logger
    ) async throws -> [AppendReading] {
        // An empty key stands for none: no envelope has an empty
        // idempotency key, and no topic key is empty.
        let topics = batch.map(\.topic)
        let keys = batch.map { ByteBuffer(bytes: $0.idempotencyKey) }
        let accessKeys = batch.map { ByteBuffer(bytes: $0.accessKey ?? Data()) }
        let rows = try await connection.query(
            """
            SELECT r.ord, d.seq, d.server_time_ms, d.payload, d.should_push, d.expires_at_ms, d.control,
            t.last_seq, t.last_control_seq, t.bytes, k.valid_through, k.access_key IS NOT NULL,
            EXISTS (SELECT 1 FROM deleted_topics WHERE topic = r.topic),
            EXISTS (SELECT 1 FROM topic_keys WHERE topic = r.topic)
            FROM unnest(\(topics)::text[], \(keys)::bytea[], \(accessKeys)::bytea[])
                WITH ORDINALITY AS r(topic, idempotency_key, access_key, ord)
            LEFT JOIN envelopes d ON d.topic = r.topic AND d.idempotency_key = NULLIF(r.idempotency_key, ''::bytea)
            LEFT JOIN topics t ON t.name = r.topic
            LEFT JOIN topic_keys k ON k.topic = r.topic AND k.access_key = r.access_key
            ORDER BY r.ord
            """, logger: logger)
        var readings: [AppendReading] = []
        readings.reserveCapacity(batch.count)
        for try await row in rows {
            let columns = row.makeRandomAccess()
            let ordinal = try columns[0].decode(Int64.self)
            guard ordinal == readings.count + 1 else { throw PostgresStoreError.noRow }
            let topic = batch[readings.count].topic
            var duplicate: WireEnvelope?
            if let seq = try columns[1].decode(Int64?.self) {
                var stored = WireEnvelope()
                stored.topic = topic
                stored.seq = UInt64(max(0, seq))
                stored.serverTimeMs = try columns[2].decode(Int64.self)
                stored.payload = try columns[3].decode(Data.self)
                stored.shouldPush = try columns[4].decode(Bool.self)
                stored.expiresAtMs = try columns[5].decode(Int64.self)
                stored.control = try columns[6].decode(Bool.self)
                duplicate = stored
            }
            let head = AppendRules.Head(
                lastSeq: try columns[7].decode(Int64?.self) ?? 0,
                lastControlSeq: try columns[8].decode(Int64?.self) ?? 0,
                bytes: try columns[9].decode(Int64?.self) ?? 0)
            let keyStatus = Self.keyStatus(
                validThrough: try columns[10].decode(Int64?.self), present: try columns[11].decode(Bool.self),
                deleted: try columns[12].decode(Bool.self), known: try columns[13].decode(Bool.self))
            readings.append(AppendReading(duplicate: duplicate, head: head, keyStatus: keyStatus))
        }
        guard readings.count == batch.count else { throw PostgresStoreError.noRow }
        return readings
    }

    /// Writes a planned batch in one round trip: every new envelope, each
    /// topic's final head, and the announcement of each envelope (sent
    /// when, and only if, the transaction commits).
    private static func write(
        _ plan: BatchAppendPlan, of batch: [PublishRequest], serverTime: Int64, nodeID: String,
        connection: PostgresConnection, logger: Logger
    ) async throws {
        guard !plan.inserts.isEmpty else { return }
        let requests = plan.inserts.map { batch[$0.index] }
        let heads = plan.heads.sorted { $0.key < $1.key }
        let headTopics = heads.map(\.key)
        let notes = zip(plan.inserts, requests).map { insert, request in "\(nodeID) \(insert.seq) \(request.topic)" }
        try await connection.query(
            """
            WITH head AS (
                INSERT INTO topics (name, last_seq, bytes, last_control_seq)
                SELECT * FROM unnest(\(headTopics)::text[], \(heads.map(\.value.lastSeq))::int8[],
                    \(heads.map(\.value.bytes))::int8[], \(heads.map(\.value.lastControlSeq))::int8[])
                ON CONFLICT (name) DO UPDATE SET last_seq = excluded.last_seq, bytes = excluded.bytes,
                last_control_seq = excluded.last_control_seq),
            stored AS (
                INSERT INTO envelopes (topic, seq, server_time_ms, payload, should_push, expires_at_ms, idempotency_key,
                control, retires_key)
                SELECT topic, seq, \(serverTime), payload, should_push, expires_at_ms,
                NULLIF(idempotency_key, ''::bytea), control, NULL
                FROM unnest(\(requests.map(\.topic))::text[], \(plan.inserts.map(\.seq))::int8[],
                    \(requests.map { ByteBuffer(bytes: $0.payload) })::bytea[], \(requests.map(\.shouldPush))::bool[],
                    \(requests.map(\.expiresAtMilliseconds))::int8[],
                    \(requests.map { ByteBuffer(bytes: $0.idempotencyKey) })::bytea[], \(requests.map(\.control))::bool[])
                    AS new(topic, seq, payload, should_push, expires_at_ms, idempotency_key, control))
            SELECT pg_notify(\(channel), note) FROM unnest(\(notes)::text[]) AS note
            """, logger: logger)
    }

    /// One publish in three round trips at most: one statement reads what
    /// the checks need (a stored retry, the topic's head, the key's
    /// status) from one snapshot, one writes the head and the envelope and
    /// announces it; founding or rotating a key adds one.
    private static func append(
        _ request: PublishRequest, serverTime: Int64, nodeID: String, connection: PostgresConnection,
        logger: Logger
    ) async throws -> Result<AppendResult, AppendRefusal> {
        let topic = request.topic
        let key: Data? = request.idempotencyKey.isEmpty ? nil : request.idempotencyKey
        // The batch read, for this one publish: it sees what the publishes
        // before it in this transaction wrote.
        let state = try await read([request], connection: connection, logger: logger)[0]
        let keyStatus: AccessKeyStatus? = request.accessKey == nil ? nil : state.keyStatus
        if let duplicate = state.duplicate { return AppendRules.retry(of: duplicate, keyStatus: keyStatus) }
        let head = state.head
        let registers: Bool
        switch AppendRules.check(request, head: head, keyStatus: keyStatus) {
        case .failure(let refusal): return .failure(refusal)
        case .success(let founds): registers = founds
        }
        if registers, let accessKey = request.accessKey {
            try await connection.query(
                "INSERT INTO topic_keys (topic, access_key, valid_through) VALUES (\(topic), \(accessKey), NULL)",
                logger: logger)
        }
        let seq = head.lastSeq + 1
        let controlSeq = request.control ? seq : head.lastControlSeq
        let newBytes = head.bytes + Int64(request.payload.count)
        let retired = AppendRules.retiredKey(by: request)
        if retired != nil, let newKey = request.rotateAccessKey {
            try await connection.query(
                """
                WITH old AS (UPDATE topic_keys SET valid_through = \(seq) WHERE topic = \(topic) AND valid_through IS NULL)
                INSERT INTO topic_keys (topic, access_key, valid_through) VALUES (\(topic), \(newKey), NULL)
                ON CONFLICT (topic, access_key) DO UPDATE SET valid_through = NULL
                """, logger: logger)
        }
        // Announced in the same transaction: sent when, and only if, it commits.
        let note = "\(nodeID) \(seq) \(topic)"
        try await connection.query(
            """
            WITH head AS (
                INSERT INTO topics (name, last_seq, bytes, last_control_seq) VALUES (\(topic), \(seq), \(newBytes), \(controlSeq))
                ON CONFLICT (name) DO UPDATE SET last_seq = excluded.last_seq, bytes = excluded.bytes,
                last_control_seq = excluded.last_control_seq RETURNING 1),
            stored AS (
                INSERT INTO envelopes (topic, seq, server_time_ms, payload, should_push, expires_at_ms, idempotency_key,
                control, retires_key) VALUES (\(topic), \(seq), \(serverTime), \(request.payload),
                \(request.shouldPush), \(request.expiresAtMilliseconds), \(key), \(request.control), \(retired))
                RETURNING 1)
            SELECT pg_notify(\(channel), \(note)) FROM head, stored
            """, logger: logger)
        return .success(
            AppendResult(
                envelope: AppendRules.envelope(request, seq: seq, serverTime: serverTime), duplicate: false,
                retiredKey: retired))
    }

    /// Takes the transaction-scoped lock of each topic, in the order
    /// given (sorted by every caller, on every node), in one round trip:
    /// the function scan yields the array's elements in order.
    private static func lock(_ topics: [String], connection: PostgresConnection, logger: Logger) async throws {
        guard !topics.isEmpty else { return }
        try await connection.query(
            "SELECT pg_advisory_xact_lock(hashtextextended(t, 0)) FROM unnest(\(topics)::text[]) AS t", logger: logger)
    }

    private static func keyStatus(validThrough: Int64?, present: Bool, deleted: Bool, known: Bool) -> AccessKeyStatus {
        if present { return .held(validThrough: validThrough) }
        if deleted { return .deleted }
        return known ? .unknown : .unregistered
    }

    /// What the topic's keys say about `key`, read in one statement (one
    /// snapshot: two statements could see another node's founding commit
    /// land between them and call the founding key unknown).
    private static func status(
        topic: String, key: Data, connection: PostgresConnection, logger: Logger
    ) async throws -> AccessKeyStatus {
        let rows = try await connection.query(
            """
            SELECT (SELECT valid_through FROM topic_keys WHERE topic = \(topic) AND access_key = \(key)),
            EXISTS (SELECT 1 FROM topic_keys WHERE topic = \(topic) AND access_key = \(key)),
            EXISTS (SELECT 1 FROM deleted_topics WHERE topic = \(topic)),
            EXISTS (SELECT 1 FROM topic_keys WHERE topic = \(topic))
            """, logger: logger)
        for try await (validThrough, present, deleted, known) in rows.decode((Int64?, Bool, Bool, Bool).self) {
            return keyStatus(validThrough: validThrough, present: present, deleted: deleted, known: known)
        }
        throw PostgresStoreError.noRow
    }

    public func accessKeyStatus(topic: String, key: Data) async throws -> AccessKeyStatus {
        let logger = logger
        return try await client.withConnection { connection in
            try await Self.status(topic: topic, key: key, connection: connection, logger: logger)
        }
    }

    public func deleteTopic(_ topic: String, accessKey: Data, nowMilliseconds: Int64) async throws -> TopicDeletion {
        let logger = logger
        return try await transaction { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(hashtextextended(\(topic), 0))", logger: logger)
            switch try await Self.status(topic: topic, key: accessKey, connection: connection, logger: logger) {
            case .deleted: return .alreadyDeleted
            case .current: break
            case let other: return .refused(other)
            }
            let deleted = try await connection.query(
                "WITH gone AS (DELETE FROM envelopes WHERE topic = \(topic) RETURNING 1) SELECT count(*) FROM gone",
                logger: logger)
            var envelopes = 0
            for try await count in deleted.decode(Int64.self) { envelopes = Int(count) }
            try await connection.query("DELETE FROM topic_keys WHERE topic = \(topic)", logger: logger)
            try await connection.query("DELETE FROM topics WHERE name = \(topic)", logger: logger)
            try await connection.query(
                "INSERT INTO deleted_topics (topic, deleted_at_ms) VALUES (\(topic), \(nowMilliseconds))",
                logger: logger)
            return .deleted(envelopes: envelopes)
        }
    }

    public func fetch(
        topic: String, after: UInt64, limit: Int, maxBytes: Int, nowMilliseconds: Int64
    ) async throws -> FetchResult {
        let after = Int64(clamping: after)
        let limit = Int64(max(0, limit))
        let logger = logger
        // One transaction at REPEATABLE READ: head and page from the same snapshot.
        return try await client.withConnection { connection in
            try await connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", logger: logger)
            do {
                var head: Int64 = 0
                for try await seq in try await connection.query(
                    "SELECT last_seq FROM topics WHERE name = \(topic)", logger: logger
                ).decode(Int64.self) { head = seq }
                let rows = try await connection.query(
                    """
                    SELECT topic, seq, server_time_ms, payload, should_push, expires_at_ms, control, retires_key
                    FROM envelopes WHERE topic = \(topic) AND seq > \(after)
                    AND (expires_at_ms = 0 OR expires_at_ms >= \(nowMilliseconds))
                    ORDER BY seq LIMIT \(limit)
                    """, logger: logger)
                var envelopes: [WireEnvelope] = []
                var retiredKeys: [UInt64: Data] = [:]
                var bytes = 0
                for try await row in rows {
                    let envelope = try Self.envelope(row)
                    if maxBytes > 0, !envelopes.isEmpty, bytes + envelope.payload.count > maxBytes { break }
                    bytes += envelope.payload.count
                    if let retired = try row.makeRandomAccess()["retires_key"].decode(Data?.self) {
                        retiredKeys[envelope.seq] = retired
                    }
                    envelopes.append(envelope)
                }
                try await connection.query("COMMIT", logger: logger)
                return FetchResult(envelopes: envelopes, headSeq: UInt64(max(0, head)), retiredKeys: retiredKeys)
            } catch {
                _ = try? await connection.query("ROLLBACK", logger: logger)
                throw error
            }
        }
    }

    /// The announced envelopes that are still stored and unexpired, as
    /// hub items, in seq order per topic: one round trip for a whole burst
    /// of another node's announcements.
    func announcedEnvelopes(_ announced: [AnnouncedEnvelope], nowMilliseconds: Int64) async throws -> [TopicHub.Item] {
        let unique = Array(Set(announced))
        let rows = try await client.query(
            """
            SELECT e.topic, e.seq, e.server_time_ms, e.payload, e.should_push, e.expires_at_ms, e.control, e.retires_key
            FROM unnest(\(unique.map(\.topic))::text[], \(unique.map { Int64(clamping: $0.seq) })::int8[]) AS a(topic, seq)
            JOIN envelopes e ON e.topic = a.topic AND e.seq = a.seq
            WHERE e.expires_at_ms = 0 OR e.expires_at_ms >= \(nowMilliseconds)
            ORDER BY e.topic, e.seq
            """, logger: logger)
        var items: [TopicHub.Item] = []
        items.reserveCapacity(unique.count)
        for try await row in rows {
            items.append(
                TopicHub.Item(
                    envelope: try Self.envelope(row),
                    retiredKey: try row.makeRandomAccess()["retires_key"].decode(Data?.self)))
        }
        return items
    }

    public func headSeq(topic: String) async throws -> UInt64 {
        var head: Int64 = 0
        for try await seq in try await client.query(
            "SELECT last_seq FROM topics WHERE name = \(topic)", logger: logger
        ).decode(Int64.self) { head = seq }
        return UInt64(max(0, head))
    }

    // MARK: Key bundles

    public func putKeyBundle(
        _ bundle: WireSignedKeyBundle, inboxID: InboxID, signingPublicKey: Data, createdAtMilliseconds: Int64
    ) async throws -> KeyBundlePutResult {
        let logger = logger
        let inbox = inboxID.rawValue
        return try await transaction { connection in
            try await connection.query(
                "SELECT pg_advisory_xact_lock(hashtextextended(\("bundle/" + inbox), 0))", logger: logger)
            let rows = try await connection.query(
                "SELECT signing_key, created_at_ms, bundle, signature FROM key_bundles WHERE inbox_id = \(inbox)",
                logger: logger)
            for try await (storedKey, storedCreatedAt, storedBundle, signature) in rows.decode(
                (Data, Int64, Data, Data).self)
            {
                guard storedKey == signingPublicKey else { throw RelayStoreError.signingKeyMismatch }
                if createdAtMilliseconds < storedCreatedAt {
                    var current = WireSignedKeyBundle()
                    current.bundle = storedBundle
                    current.signature = signature
                    return .stale(current: current)
                }
            }
            try await connection.query(
                """
                INSERT INTO key_bundles (inbox_id, signing_key, created_at_ms, bundle, signature)
                VALUES (\(inbox), \(signingPublicKey), \(createdAtMilliseconds), \(bundle.bundle), \(bundle.signature))
                ON CONFLICT (inbox_id) DO UPDATE SET created_at_ms = excluded.created_at_ms,
                bundle = excluded.bundle, signature = excluded.signature
                """, logger: logger)
            return .stored
        }
    }

    public func keyBundle(inboxID: InboxID) async throws -> WireSignedKeyBundle? {
        let rows = try await client.query(
            "SELECT bundle, signature FROM key_bundles WHERE inbox_id = \(inboxID.rawValue)", logger: logger)
        for try await (bundle, signature) in rows.decode((Data, Data).self) {
            var signed = WireSignedKeyBundle()
            signed.bundle = bundle
            signed.signature = signature
            return signed
        }
        return nil
    }

    // MARK: Pruning

    public func deleteExpired(nowMilliseconds: Int64, inboxCutoffMilliseconds: Int64) async throws -> Int {
        let logger = logger
        return try await transaction { connection in
            // The topics this touches are locked first, in the order
            // publishers lock them: a publish never reads a byte count this
            // is about to lower, and the two never wait on each other in a
            // cycle.
            let touched = try await connection.query(
                """
                SELECT DISTINCT topic FROM envelopes
                WHERE (expires_at_ms > 0 AND expires_at_ms < \(nowMilliseconds))
                OR (\(inboxCutoffMilliseconds) > 0 AND topic LIKE 'inbox/%' AND server_time_ms < \(inboxCutoffMilliseconds))
                ORDER BY topic
                """, logger: logger)
            var topics: [String] = []
            for try await topic in touched.decode(String.self) { topics.append(topic) }
            try await Self.lock(topics.sorted(), connection: connection, logger: logger)
            // Quotas count stored bytes, so deleted payloads give them back;
            // topic heads stay, so a seq is never handed out twice.
            let rows = try await connection.query(
                """
                WITH gone AS (
                    DELETE FROM envelopes
                    WHERE (expires_at_ms > 0 AND expires_at_ms < \(nowMilliseconds))
                    OR (\(inboxCutoffMilliseconds) > 0 AND topic LIKE 'inbox/%' AND server_time_ms < \(inboxCutoffMilliseconds))
                    RETURNING topic, length(payload) AS size),
                freed AS (SELECT topic, SUM(size) AS bytes, COUNT(*) AS envelopes FROM gone GROUP BY topic),
                updated AS (UPDATE topics SET bytes = topics.bytes - freed.bytes FROM freed WHERE topics.name = freed.topic)
                SELECT COALESCE(SUM(envelopes), 0)::BIGINT FROM freed
                """, logger: logger)
            var deleted = 0
            for try await count in rows.decode(Int64.self) { deleted = Int(count) }
            return deleted
        }
    }

    // MARK: Push targets

    /// Registering or removing a target is announced on the channel too
    /// (`<node> push+ <inbox>`, `<node> push- <inbox>`), so every node's
    /// push side learns of it, not only the node that took the request.
    public func register(inbox: String, url: URL, nowMilliseconds: Int64) async throws {
        let note = "\(nodeID) push+ \(inbox)"
        try await transaction { connection in
            try await connection.query(
                """
                INSERT INTO push_targets (inbox_id, url, registered_at_ms) VALUES (\(inbox), \(url.absoluteString), \(nowMilliseconds))
                ON CONFLICT (inbox_id) DO UPDATE SET url = excluded.url, registered_at_ms = excluded.registered_at_ms
                """, logger: logger)
            try await connection.query("SELECT pg_notify(\(Self.channel), \(note))", logger: logger)
        }
    }

    public func unregister(inbox: String) async throws -> Bool {
        let note = "\(nodeID) push- \(inbox)"
        return try await transaction { connection in
            let rows = try await connection.query(
                "DELETE FROM push_targets WHERE inbox_id = \(inbox) RETURNING inbox_id", logger: logger)
            var removed = false
            for try await _ in rows { removed = true }
            if removed { try await connection.query("SELECT pg_notify(\(Self.channel), \(note))", logger: logger) }
            return removed
        }
    }

    public func target(inbox: String) async throws -> URL? {
        let rows = try await client.query("SELECT url FROM push_targets WHERE inbox_id = \(inbox)", logger: logger)
        for try await url in rows.decode(String.self) { return URL(string: url) }
        return nil
    }

    public func registeredInboxes() async throws -> [String] {
        var inboxes: [String] = []
        for try await inbox in try await client.query("SELECT inbox_id FROM push_targets", logger: logger).decode(
            String.self)
        {
            inboxes.append(inbox)
        }
        return inboxes
    }

    public func close() async throws {
        runTask.cancel()
        await runTask.value
    }

    private static func envelope(_ row: PostgresRow) throws -> WireEnvelope {
        let (topic, seq, serverTime, payload, shouldPush, expiresAt, control) = try row.decode(
            (String, Int64, Int64, Data, Bool, Int64, Bool).self)
        return WireEnvelope(
            stored: topic, seq: seq, serverTime: serverTime, payload: payload, shouldPush: shouldPush,
            expiresAt: expiresAt, control: control)
    }
}
