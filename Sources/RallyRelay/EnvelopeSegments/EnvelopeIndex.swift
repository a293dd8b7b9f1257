import Foundation

/// What the embedded store knows about its envelopes without reading them:
/// each topic's head, its entries in seq order with where each is in the
/// segments, its idempotency keys and its chain of access keys. An append
/// reads nothing from disk (ADR 0029); the store rebuilds the index from
/// its segments and its SQLite checkpoint at open (ADR 0030).
struct EnvelopeIndex: Sendable {
    /// One stored envelope: where it is and until when it is readable.
    struct Entry: Sendable, Equatable {
        var seq: Int64
        /// 0: it never expires.
        var expiresAtMilliseconds: Int64
        /// When the relay stored it (inboxes are pruned by age).
        var storedAtMilliseconds: Int64
        var location: SegmentLocation
        var payloadBytes: UInt32

        func isReadable(at nowMilliseconds: Int64) -> Bool {
            expiresAtMilliseconds == 0 || expiresAtMilliseconds >= nowMilliseconds
        }
    }

    struct Topic: Sendable {
        var head = AppendRules.Head()
        /// Stored envelopes, in seq order.
        var entries: [Entry] = []
        /// Idempotency key → the seq it stored.
        var keys: [Key: Int64] = [:]
        /// The topic's access keys: its current one, and the retired ones
        /// with the last seq each may read.
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

    /// An entry pruned from a topic.
    struct Removal: Sendable, Equatable {
        var topic: String
        var entry: Entry
    }

    /// What a checkpoint writes of one topic: its head, and its key chain
    /// when that changed since the last one.
    struct Checkpoint: Sendable, Equatable {
        var topic: String
        var head: AppendRules.Head
        var accessKeys: [Data: AccessKeyStatus]?
    }

    private var topics: [String: Topic] = [:]
    /// What is live in each segment: one with nothing left is deleted, one
    /// with little left is compacted.
    struct SegmentUse: Sendable, Equatable {
        var entries = 0
        var bytes = 0
    }
    private(set) var live: [UInt32: SegmentUse] = [:]

    private mutating func count(_ entry: Entry, _ sign: Int) {
        count(entries: sign, bytes: sign * Int(entry.location.size), in: entry.location.segment)
    }

    private mutating func count(entries: Int, bytes: Int, in segment: UInt32) {
        live[segment, default: SegmentUse()].entries += entries
        live[segment, default: SegmentUse()].bytes += bytes
    }

    /// Pruned entries met while replaying: a pruned entry a compaction had
    /// copied must not come back through the copy it was made from.
    private var replayedPrunes: [(topic: String, seq: Int64, location: SegmentLocation)] = []
    /// Topics whose head, or key chain, SQLite's checkpoint does not hold.
    private var changedHeads: Set<String> = []
    private var changedKeys: Set<String> = []
    /// Tombstones, from `deleted_topics`: an append never reads SQLite.
    private var deletedTopics: Set<String> = []

    func isDeleted(_ topic: String) -> Bool { deletedTopics.contains(topic) }

    /// A tombstone read at open.
    mutating func loadTombstone(_ topic: String) { deletedTopics.insert(topic) }

    func head(of topic: String) -> AppendRules.Head { topics[topic]?.head ?? AppendRules.Head() }

    /// The stored entry that `key` stored on `topic`, if it is still there.
    func original(topic: String, key: Data) -> Entry? {
        topics[topic]?.original(key: Key(key))
    }

    /// A key's status from the index alone.
    func keyStatus(topic: String, key: Data) -> AccessKeyStatus {
        let stored = topics[topic]
        return keyStatus(topic: topic, held: stored?.accessKeys[key], holdsKeys: stored?.accessKeys.isEmpty == false)
    }

    /// `held` for a key the topic holds (`.current` or `.retired`); for any
    /// other, whether the topic was deleted, founded or never created.
    fileprivate func keyStatus(topic: String, held: AccessKeyStatus?, holdsKeys: Bool) -> AccessKeyStatus {
        if let held { return held }
        if isDeleted(topic) { return .deleted }
        return holdsKeys ? .unknown : .unregistered
    }

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

    /// How many entries `topic` holds, readable or not.
    func entryCount(of topic: String) -> Int { topics[topic]?.entries.count ?? 0 }

    fileprivate static func firstIndex(in entries: [Entry], after seq: Int64) -> Int {
        var low = 0
        var high = entries.count
        while low < high {
            let middle = (low + high) / 2
            if entries[middle].seq <= seq { low = middle + 1 } else { high = middle }
        }
        return low
    }

    // MARK: Building at open

    /// A head kept in the `topics` table: it outlives the entries it counted.
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

    /// One entry read back from a segment at open, oldest first. Its key
    /// changes count only past `checkpointedSeq`: up to it, `topic_keys`
    /// holds them already. A pruned entry still moves the head.
    mutating func replay(
        _ logged: LoggedEntry, at location: SegmentLocation, checkpointedSeq: Int64, pruned: Bool
    ) {
        if logged.seq > checkpointedSeq {
            changedHeads.insert(logged.topic)
            if logged.registersKey != nil || logged.rotatesTo != nil { changedKeys.insert(logged.topic) }
        }
        if pruned {
            replayedPrunes.append((logged.topic, logged.seq, location))
        } else {
            count(Self.entry(logged, at: location), 1)
        }
        // In place: a copy of the topic taken out and put back would copy
        // its entries at every one, quadratic in a topic's size.
        Self.replay(
            logged, at: location, checkpointedSeq: checkpointedSeq, pruned: pruned,
            into: &topics[logged.topic, default: Topic()])
    }

    private static func replay(
        _ logged: LoggedEntry, at location: SegmentLocation, checkpointedSeq: Int64, pruned: Bool,
        into topic: inout Topic
    ) {
        if logged.seq > checkpointedSeq { logged.applyKeyChanges(to: &topic.accessKeys) }
        topic.head.include(logged)
        guard !pruned else { return }
        topic.record(entry(logged, at: location))
        if let key = logged.idempotencyKey { topic.keys[Key(key)] = logged.seq }
    }

    static func entry(_ logged: LoggedEntry, at location: SegmentLocation) -> Entry {
        Entry(
            seq: logged.seq, expiresAtMilliseconds: logged.expiresAt, storedAtMilliseconds: logged.serverTime,
            location: location, payloadBytes: UInt32(logged.payload.count))
    }

    /// Once every segment is replayed. A topic's entries are appended in
    /// seq order except where a compaction copied older ones to a newer
    /// segment: then the copy, the later place, is kept, and a copy that
    /// was pruned takes its original with it.
    mutating func finishLoading() {
        var pruned: [String: [Int64: SegmentLocation]] = [:]
        for prune in replayedPrunes { pruned[prune.topic, default: [:]][prune.seq] = prune.location }
        replayedPrunes = []
        for name in topics.keys {
            guard let dropped = topics[name]?.keepLatestPlaces(prunedAt: pruned[name] ?? [:]) else { continue }
            for entry in dropped { count(entry, -1) }
        }
    }

    /// Entries that live in `segments`, with their topics: what a
    /// compaction copies. A scan of every entry, like `expired`.
    func entries(in segments: Set<UInt32>, of names: some Sequence<String>) -> [(topic: String, entry: Entry)] {
        var found: [(topic: String, entry: Entry)] = []
        for name in names {
            for entry in topics[name]?.entries ?? [] where segments.contains(entry.location.segment) {
                found.append((name, entry))
            }
        }
        return found
    }

    /// Every topic the index holds: scans go through them a few at a time,
    /// so that appends wait for the index's lock no longer than a slice
    /// takes.
    var topicNames: [String] { Array(topics.keys) }

    /// A compaction copied `topic`'s entry at `seq` from `old` to `new`:
    /// reads go to the copy. Nothing changes if the entry is gone or has
    /// moved since.
    mutating func move(_ topic: String, seq: Int64, from old: SegmentLocation, to new: SegmentLocation) {
        guard let moved = topics[topic]?.relocate(seq: seq, from: old, to: new) else { return }
        count(moved, -1)
        var placed = moved
        placed.location = new
        count(placed, 1)
    }

    // MARK: Changing

    /// A batch's appends, applied to the index only once its record is
    /// synced, so a reader never sees a head whose entry it cannot read.
    /// Entries are placed from the record's start until the writer says
    /// where the record went.
    struct Pending: Sendable {
        fileprivate struct Delta: Sendable {
            var head: AppendRules.Head
            var entries: [Entry] = []
            var keys: [Key: Int64] = [:]
            var accessKeys: [Data: AccessKeyStatus] = [:]
        }
        fileprivate var topics: [String: Delta] = [:]
        /// The batch's entries in record order, and where the next goes.
        private(set) var logged: [LoggedEntry] = []
        private var nextOffset = SegmentRecord.firstEntryOffset

        init() {}

        /// Room for a batch of `count` publishes, most of them to topics of
        /// their own: the dictionary is not grown and rehashed along the way.
        init(reservingCapacity count: Int) {
            topics.reserveCapacity(count)
            logged.reserveCapacity(count)
        }

        var isEmpty: Bool { logged.isEmpty }

        /// What an append checks of its topic, from one lookup of the topic
        /// in the batch and one in the index: the head it appends after,
        /// the original of a retry, and the status of its access key.
        struct Look {
            var head: AppendRules.Head
            var original: Original?
            var keyStatus: AccessKeyStatus?
        }

        func look(topic: String, idempotencyKey: Data?, accessKey: Data?, in index: EnvelopeIndex) -> Look {
            let delta = topics[topic]
            let stored = index.topics[topic]
            var original: Original?
            if let idempotencyKey {
                let key = Key(idempotencyKey)
                if let seq = delta?.keys[key], let logged = logged.last(where: { $0.seq == seq && $0.topic == topic }) {
                    original = .inBatch(logged)
                } else if let stored, let entry = stored.original(key: key) {
                    original = .stored(entry.location)
                }
            }
            let keyStatus = accessKey.map { accessKey in
                index.keyStatus(
                    topic: topic, held: delta?.accessKeys[accessKey] ?? stored?.accessKeys[accessKey],
                    holdsKeys: delta?.accessKeys.isEmpty == false || stored?.accessKeys.isEmpty == false)
            }
            return Look(
                head: delta?.head ?? stored?.head ?? AppendRules.Head(), original: original, keyStatus: keyStatus)
        }

        enum Original {
            case inBatch(LoggedEntry)
            case stored(SegmentLocation)

            var location: SegmentLocation? {
                guard case .stored(let location) = self else { return nil }
                return location
            }
        }

        /// `logged` appended after `head` (the head `head(of:in:)` gave),
        /// with its key changes.
        mutating func append(_ logged: LoggedEntry, after head: AppendRules.Head, in index: EnvelopeIndex) {
            let size = SegmentRecord.encodedSize(of: logged)
            let entry = EnvelopeIndex.entry(
                logged, at: SegmentLocation(segment: 0, offset: UInt32(nextOffset), size: UInt32(size)))
            nextOffset += size
            self.logged.append(logged)
            // The keys the topic held before this batch, for a rotation.
            let held = logged.rotatesTo == nil ? [:] : (index.topics[logged.topic]?.accessKeys ?? [:])
            Self.add(logged, entry, held: held, to: &topics[logged.topic, default: Delta(head: head)])
        }

        /// In place, like `replay`: a batch of many publishes to one topic
        /// must not copy its delta at each.
        private static func add(
            _ logged: LoggedEntry, _ entry: Entry, held: [Data: AccessKeyStatus], to delta: inout Delta
        ) {
            logged.applyKeyChanges(to: &delta.accessKeys, heldBefore: held)
            delta.head.include(logged)
            delta.head.bytes += Int64(logged.payload.count)
            delta.entries.append(entry)
            if let key = logged.idempotencyKey { delta.keys[Key(key)] = logged.seq }
        }
    }

    /// A synced batch, whose record starts at `recordOffset` of `segment`.
    mutating func apply(_ pending: Pending, segment: UInt32, recordOffset: Int) {
        var entries = 0
        var bytes = 0
        for (name, delta) in pending.topics {
            changedHeads.insert(name)
            if !delta.accessKeys.isEmpty { changedKeys.insert(name) }
            bytes += topics[name, default: Topic()].take(delta, segment: segment, recordOffset: UInt32(recordOffset))
            entries += delta.entries.count
        }
        // The whole record is in one segment: counted there once.
        count(entries: entries, bytes: bytes, in: segment)
    }

    /// Entries of `names` past their expiry, and inbox entries stored
    /// before `inboxCutoffMilliseconds` (0: none). Pruning scans every topic
    /// this way once a minute, off the publish path.
    func expired(
        among names: some Sequence<String>, nowMilliseconds: Int64, inboxCutoffMilliseconds: Int64
    ) -> [Removal] {
        var removals: [Removal] = []
        for name in names {
            let isInbox = inboxCutoffMilliseconds > 0 && name.hasPrefix("inbox/")
            for entry in topics[name]?.entries ?? []
            where (entry.expiresAtMilliseconds > 0 && entry.expiresAtMilliseconds < nowMilliseconds)
                || (isInbox && entry.storedAtMilliseconds < inboxCutoffMilliseconds)
            {
                removals.append(Removal(topic: name, entry: entry))
            }
        }
        return removals
    }

    /// Forgets pruned entries. Heads stay: a seq is never given twice.
    mutating func remove(_ removals: [Removal]) {
        for (name, removed) in Dictionary(grouping: removals, by: \.topic) {
            for entry in topics[name]?.forget(removed.map(\.entry)) ?? [] {
                count(entry, -1)
            }
        }
    }

    /// Forgets a deleted topic and keeps its tombstone (SQLite holds it
    /// too): the name can never be founded again.
    mutating func removeTopic(_ topic: String) {
        for entry in topics[topic]?.entries ?? [] { count(entry, -1) }
        topics[topic] = nil
        deletedTopics.insert(topic)
        changedHeads.remove(topic)
        changedKeys.remove(topic)
    }

    /// Segments among `ids` that hold no live entry.
    func deadSegments(among ids: [UInt32]) -> [UInt32] {
        ids.filter { (live[$0]?.entries ?? 0) <= 0 }
    }

    mutating func forgetSegments(_ ids: [UInt32]) {
        for id in ids { live[id] = nil }
    }

    /// What SQLite's checkpoint lacks, taken: appends after this are the
    /// next checkpoint's. `restore(_:)` gives it back if it is not written.
    mutating func takeCheckpoint() -> [Checkpoint] {
        defer {
            changedHeads = []
            changedKeys = []
        }
        return changedHeads.compactMap { name in
            topics[name].map {
                Checkpoint(topic: name, head: $0.head, accessKeys: changedKeys.contains(name) ? $0.accessKeys : nil)
            }
        }
    }

    mutating func restore(_ checkpoint: [Checkpoint]) {
        for topic in checkpoint where topics[topic.topic] != nil {
            changedHeads.insert(topic.topic)
            if topic.accessKeys != nil { changedKeys.insert(topic.topic) }
        }
    }
}

extension EnvelopeIndex.Topic {
    /// The stored entry that `key` stored, if it is still there.
    fileprivate func original(key: EnvelopeIndex.Key) -> EnvelopeIndex.Entry? {
        guard let seq = keys[key] else { return nil }
        let index = EnvelopeIndex.firstIndex(in: entries, after: seq - 1)
        return index < entries.count && entries[index].seq == seq ? entries[index] : nil
    }

    fileprivate mutating func record(_ entry: EnvelopeIndex.Entry) {
        entries.append(entry)
        head.bytes += Int64(entry.payloadBytes)
    }

    /// A synced batch's changes, in one access to the topic: its arrays and
    /// dictionaries stay unique, so nothing is copied.
    /// The entries are placed (their segment and offset) as they are
    /// appended, not in a copy of the batch's array first. Returns the
    /// bytes they take in the segment.
    fileprivate mutating func take(
        _ delta: EnvelopeIndex.Pending.Delta, segment: UInt32, recordOffset: UInt32
    ) -> Int {
        head = delta.head
        var bytes = 0
        for var entry in delta.entries {
            entry.location.segment = segment
            entry.location.offset += recordOffset
            bytes += Int(entry.location.size)
            entries.append(entry)
        }
        // A batch brings a key or two per topic: inserted one by one, not
        // merged, which costs more than the insertions for so few.
        for (key, seq) in delta.keys { keys[key] = seq }
        for (key, status) in delta.accessKeys { accessKeys[key] = status }
        return bytes
    }

    /// The entries it held of `removed`, now forgotten.
    fileprivate mutating func forget(_ removed: [EnvelopeIndex.Entry]) -> [EnvelopeIndex.Entry] {
        let seqs = Set(removed.map(\.seq))
        let forgotten = entries.filter { seqs.contains($0.seq) }
        entries.removeAll { seqs.contains($0.seq) }
        head.bytes -= forgotten.reduce(0) { $0 + Int64($1.payloadBytes) }
        if !keys.isEmpty { keys = keys.filter { !seqs.contains($0.value) } }
        return forgotten
    }

    /// Sorts by seq, then place; of entries with one seq keeps the last
    /// place (a compaction's copy), and drops an entry whose later copy was
    /// pruned. Returns what it dropped; nil when nothing was out of order.
    fileprivate mutating func keepLatestPlaces(prunedAt pruned: [Int64: SegmentLocation]) -> [EnvelopeIndex.Entry]? {
        let ordered = zip(entries, entries.dropFirst()).allSatisfy { $0.seq < $1.seq }
        guard !ordered || !pruned.isEmpty else { return nil }
        if !ordered { entries.sort { ($0.seq, $0.location) < ($1.seq, $1.location) } }
        var kept: [EnvelopeIndex.Entry] = []
        var dropped: [EnvelopeIndex.Entry] = []
        kept.reserveCapacity(entries.count)
        for entry in entries {
            if let copy = pruned[entry.seq], entry.location < copy {
                dropped.append(entry)
            } else if let last = kept.last, last.seq == entry.seq {
                dropped.append(last)
                kept[kept.count - 1] = entry
            } else {
                kept.append(entry)
            }
        }
        guard !dropped.isEmpty else { return [] }
        entries = kept
        head.bytes -= dropped.reduce(0) { $0 + Int64($1.payloadBytes) }
        let seqs = Set(kept.map(\.seq))
        if !keys.isEmpty { keys = keys.filter { seqs.contains($0.value) } }
        return dropped
    }

    /// The entry at `seq` if it is at `old`, moved to `new`.
    fileprivate mutating func relocate(
        seq: Int64, from old: SegmentLocation, to new: SegmentLocation
    ) -> EnvelopeIndex.Entry? {
        let index = EnvelopeIndex.firstIndex(in: entries, after: seq - 1)
        guard index < entries.count, entries[index].seq == seq, entries[index].location == old else { return nil }
        let before = entries[index]
        entries[index].location = new
        return before
    }
}

extension SegmentLocation: Comparable {
    static func < (left: SegmentLocation, right: SegmentLocation) -> Bool {
        (left.segment, left.offset) < (right.segment, right.offset)
    }
}

extension LoggedEntry {
    /// What storing it changes in its topic's key chain, written into
    /// `keys`: a founding key becomes current; a rotation retires every
    /// current key at this seq and makes its new key current. The current
    /// keys are those of `keys`, and of `heldBefore` where `keys` does not
    /// say otherwise (a batch's changes over what the index holds). One
    /// rule for appends and for replay at open.
    func applyKeyChanges(to keys: inout [Data: AccessKeyStatus], heldBefore: [Data: AccessKeyStatus] = [:]) {
        if let registersKey { keys[registersKey] = .current }
        guard let rotatesTo else { return }
        let current = heldBefore.merging(keys) { _, own in own }.filter { $0.value == .current }.keys
        for key in current { keys[key] = .retired(validThrough: UInt64(max(0, seq))) }
        keys[rotatesTo] = .current
    }
}

extension AppendRules.Head {
    /// The head once `logged` is stored: never moving back, so replay
    /// (where a compaction's copy can come after later seqs) and the move
    /// out of SQLite share it with appends.
    mutating func include(_ logged: LoggedEntry) {
        lastSeq = max(lastSeq, logged.seq)
        if logged.control { lastControlSeq = max(lastControlSeq, logged.seq) }
    }
}
