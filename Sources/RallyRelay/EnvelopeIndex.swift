import Foundation

/// What the SQLite store knows about its envelopes without reading them:
/// each topic's head, its rows in seq order, its idempotency keys and its
/// chain of access keys. It lives in memory so that an append writes one
/// row and reads nothing of SQLite's (ADR 0029); the store rebuilds it from
/// its rows and its `topic_keys` at open.
struct EnvelopeIndex: Sendable {
    /// One stored envelope: where its row is and until when it is readable.
    struct Entry: Sendable, Equatable {
        var seq: Int64
        var rowID: Int64
        /// 0: it never expires.
        var expiresAtMilliseconds: Int64

        func isReadable(at nowMilliseconds: Int64) -> Bool {
            expiresAtMilliseconds == 0 || expiresAtMilliseconds >= nowMilliseconds
        }
    }

    struct Topic: Sendable {
        var head = AppendRules.Head()
        /// Stored envelopes, in seq order.
        var entries: [Entry] = []
        /// Idempotency key → the row it stored.
        var keys: [Key: Int64] = [:]
        /// The topic's access keys: its current one, and the retired ones
        /// with the last seq each may read (`topic_keys`).
        var accessKeys: [Data: AccessKeyStatus] = [:]
    }

    /// An idempotency key as a dictionary key. Clients send 16 bytes, which
    /// fit in the value itself. As `Data`, each key was an allocation of its
    /// own: a million stored envelopes with keys took 181 MiB of the relay's
    /// memory instead of 95 MiB (ADR 0029).
    enum Key: Hashable, Sendable {
        case inline(UInt64, UInt64, count: UInt8)
        case long(Data)

        init(_ data: Data) {
            guard data.count <= 16 else {
                self = .long(data)
                return
            }
            var words: (UInt64, UInt64) = (0, 0)
            withUnsafeMutableBytes(of: &words) { words in
                data.withUnsafeBytes { bytes in words.copyMemory(from: bytes) }
            }
            self = .inline(words.0, words.1, count: UInt8(data.count))
        }
    }

    /// A row deleted from the table, as its `RETURNING` clause gives it.
    struct Removal: Sendable, Equatable {
        var topic: String
        var seq: Int64
        var payloadBytes: Int64
        var idempotencyKey: Data?
    }

    private var topics: [String: Topic] = [:]

    func head(of topic: String) -> AppendRules.Head { topics[topic]?.head ?? AppendRules.Head() }

    func original(topic: String, key: Data) -> Int64? { topics[topic]?.keys[Key(key)] }

    /// `.current` or `.retired` for a key the topic holds; nil for any
    /// other key (the store tells unknown, unregistered and deleted apart).
    func heldKey(topic: String, key: Data) -> AccessKeyStatus? { topics[topic]?.accessKeys[key] }

    /// Whether the topic holds any access key (it was founded and not
    /// deleted).
    func holdsKeys(topic: String) -> Bool { topics[topic]?.accessKeys.isEmpty == false }

    /// The first `limit` readable entries after `seq`, in seq order. A copy:
    /// a slice would keep the topic's array shared, and the next append
    /// would copy all of it.
    func entries(of topic: String, after seq: Int64, limit: Int, nowMilliseconds: Int64) -> [Entry] {
        guard limit > 0, let entries = topics[topic]?.entries else { return [] }
        var found: [Entry] = []
        var index = Self.firstIndex(in: entries, after: seq)
        while index < entries.count, found.count < limit {
            if entries[index].isReadable(at: nowMilliseconds) { found.append(entries[index]) }
            index += 1
        }
        return found
    }

    /// Every row of `topic`, readable or not.
    func rowIDs(of topic: String) -> [Int64] { topics[topic]?.entries.map(\.rowID) ?? [] }

    private static func firstIndex(in entries: [Entry], after seq: Int64) -> Int {
        var low = 0
        var high = entries.count
        while low < high {
            let middle = (low + high) / 2
            if entries[middle].seq <= seq { low = middle + 1 } else { high = middle }
        }
        return low
    }

    // MARK: Building at open

    /// A head kept in the `topics` table: it outlives the rows it counted.
    mutating func seed(topic: String, lastSeq: Int64, lastControlSeq: Int64) {
        var seeded = topics[topic] ?? Topic()
        seeded.head.lastSeq = max(seeded.head.lastSeq, lastSeq)
        seeded.head.lastControlSeq = max(seeded.head.lastControlSeq, lastControlSeq)
        topics[topic] = seeded
    }

    /// One row of `topic_keys`: NULL `valid_through` is the current key.
    mutating func loadKey(topic: String, key: Data, validThrough: Int64?) {
        topics[topic, default: Topic()].accessKeys[key] = .held(validThrough: validThrough)
    }

    /// One stored row, read in row order at open.
    mutating func load(
        topic: String, entry: Entry, payloadBytes: Int64, control: Bool, idempotencyKey: Data?
    ) {
        topics[topic, default: Topic()].record(
            entry, payloadBytes: payloadBytes, control: control, idempotencyKey: idempotencyKey)
    }

    /// Once every row is loaded: a topic's rows are appended in seq order,
    /// so this sorts only what a hand-edited table left out of order.
    mutating func finishLoading() {
        for name in topics.keys {
            topics[name]?.sortIfNeeded()
        }
    }

    // MARK: Changing

    /// A batch's appends, applied to the index only once its transaction
    /// has committed, so a reader never sees a head whose row it cannot read.
    struct Pending: Sendable {
        fileprivate struct Delta: Sendable {
            var head: AppendRules.Head
            var entries: [Entry] = []
            var keys: [Key: Int64] = [:]
            var accessKeys: [Data: AccessKeyStatus] = [:]
        }
        fileprivate var topics: [String: Delta] = [:]

        func heldKey(topic: String, key: Data, in index: EnvelopeIndex) -> AccessKeyStatus? {
            topics[topic]?.accessKeys[key] ?? index.heldKey(topic: topic, key: key)
        }

        func holdsKeys(topic: String, in index: EnvelopeIndex) -> Bool {
            topics[topic]?.accessKeys.isEmpty == false || index.holdsKeys(topic: topic)
        }

        /// A founding publish registered `key` as the topic's first.
        mutating func registered(_ key: Data, topic: String, in index: EnvelopeIndex) {
            change(topic, in: index) { $0.accessKeys[key] = .current }
        }

        /// A rotation at `seq`: every current key reads up to `seq`, and
        /// `newKey` is current (again, if it was retired).
        mutating func rotated(topic: String, at seq: Int64, to newKey: Data, in index: EnvelopeIndex) {
            let base = index.topics[topic]?.accessKeys ?? [:]
            let merged = base.merging(topics[topic]?.accessKeys ?? [:]) { _, pending in pending }
            change(topic, in: index) { delta in
                for (key, status) in merged where status == .current {
                    delta.accessKeys[key] = .retired(validThrough: UInt64(max(0, seq)))
                }
                delta.accessKeys[newKey] = .current
            }
        }

        private mutating func change(_ topic: String, in index: EnvelopeIndex, _ body: (inout Delta) -> Void) {
            var delta = topics[topic] ?? Delta(head: index.head(of: topic))
            body(&delta)
            topics[topic] = delta
        }

        func head(of topic: String, in index: EnvelopeIndex) -> AppendRules.Head {
            topics[topic]?.head ?? index.head(of: topic)
        }

        func original(topic: String, key: Data, in index: EnvelopeIndex) -> Int64? {
            topics[topic]?.keys[Key(key)] ?? index.original(topic: topic, key: key)
        }

        /// `entry` appended after `head` (the head `head(of:in:)` gave,
        /// which starts the topic's changes if it has none yet).
        mutating func append(
            _ entry: Entry, topic: String, after head: AppendRules.Head, payloadBytes: Int64, control: Bool,
            idempotencyKey: Data?
        ) {
            var delta = topics[topic] ?? Delta(head: head)
            delta.head.lastSeq = entry.seq
            delta.head.bytes += payloadBytes
            if control { delta.head.lastControlSeq = entry.seq }
            delta.entries.append(entry)
            if let idempotencyKey { delta.keys[Key(idempotencyKey)] = entry.rowID }
            topics[topic] = delta
        }
    }

    mutating func apply(_ pending: Pending) {
        for (name, delta) in pending.topics {
            topics[name, default: Topic()].take(delta)
        }
    }

    /// Forgets deleted rows. Heads stay: a seq is never given twice.
    mutating func remove(_ removals: [Removal]) {
        for (name, removed) in Dictionary(grouping: removals, by: \.topic) {
            topics[name]?.forget(removed)
        }
    }

    /// Forgets a deleted topic: its tombstone, in SQLite, answers for it.
    mutating func removeTopic(_ topic: String) {
        topics[topic] = nil
    }
}

extension EnvelopeIndex.Topic {
    fileprivate mutating func record(
        _ entry: EnvelopeIndex.Entry, payloadBytes: Int64, control: Bool, idempotencyKey: Data?
    ) {
        entries.append(entry)
        head.lastSeq = max(head.lastSeq, entry.seq)
        if control { head.lastControlSeq = max(head.lastControlSeq, entry.seq) }
        head.bytes += payloadBytes
        if let idempotencyKey { keys[EnvelopeIndex.Key(idempotencyKey)] = entry.rowID }
    }

    /// A committed batch's changes, in one access to the topic: its arrays
    /// and dictionaries stay unique, so nothing is copied.
    fileprivate mutating func take(_ delta: EnvelopeIndex.Pending.Delta) {
        head = delta.head
        entries.append(contentsOf: delta.entries)
        keys.merge(delta.keys) { _, new in new }
        accessKeys.merge(delta.accessKeys) { _, new in new }
    }

    fileprivate mutating func forget(_ removed: [EnvelopeIndex.Removal]) {
        let seqs = Set(removed.map(\.seq))
        entries.removeAll { seqs.contains($0.seq) }
        head.bytes -= removed.reduce(0) { $0 + $1.payloadBytes }
        for key in removed.compactMap(\.idempotencyKey) { keys[EnvelopeIndex.Key(key)] = nil }
    }

    fileprivate mutating func sortIfNeeded() {
        guard zip(entries, entries.dropFirst()).contains(where: { $0.seq >= $1.seq }) else { return }
        entries.sort { $0.seq < $1.seq }
    }
}
