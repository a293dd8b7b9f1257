import Foundation
import RallyWire

/// One envelope as a segment holds it, with the changes to its topic's key
/// chain that storing it made (ADR 0030): replaying the segments rebuilds
/// what the store's index and `topic_keys` would otherwise have to be
/// written for on every append.
struct LoggedEntry: Sendable, Equatable {
    var topic: String
    var seq: Int64
    var serverTime: Int64
    /// 0: it never expires.
    var expiresAt: Int64
    var payload: Data
    var shouldPush: Bool
    var control: Bool
    var idempotencyKey: Data?
    /// The access key this entry retired (a rotation), given to readers.
    var retiresKey: Data?
    /// The key this entry founded its topic with.
    var registersKey: Data?
    /// The key this entry rotated its topic to.
    var rotatesTo: Data?

    /// The keys it carries, in the order a record holds them. A loop over
    /// an array of the four made an array per entry on the commit's path.
    func forEachKey(_ body: (Data) throws -> Void) rethrows {
        if let idempotencyKey { try body(idempotencyKey) }
        if let retiresKey { try body(retiresKey) }
        if let registersKey { try body(registersKey) }
        if let rotatesTo { try body(rotatesTo) }
    }

    var envelope: WireEnvelope {
        WireEnvelope(
            stored: topic, seq: seq, serverTime: serverTime, payload: payload, shouldPush: shouldPush,
            expiresAt: expiresAt, control: control)
    }
}

/// The segments' on-disk limits. A length beyond one of them is damage,
/// not a record.
enum SegmentLimits {
    /// "RES1": tells a record from the zeros after the last one.
    static let magic: UInt32 = 0x3153_4552
    /// Magic, body length and checksum.
    static let headerBytes = 12
    /// The entry count that starts a body.
    static let countBytes = 4
    /// Far above any batch the writer forms (its queue holds at most
    /// `RelayLimits.maxWriteQueueBytes`, 64 MiB by default).
    static let maxBodyBytes = 1 << 30
    /// An entry's fixed part: flags, three 64-bit integers and the lengths
    /// of its topic and payload.
    static let entryFixedBytes = 1 + 3 * 8 + 2 * 4
    /// Longest access key or idempotency key an entry may carry.
    static let maxKeyBytes = 4096
    /// Longest topic name, in UTF-8 bytes (the wire allows 160).
    static let maxTopicBytes = 4096
    /// Largest payload (the wire allows 256 KiB).
    static let maxPayloadBytes = 16 << 20
}

enum SegmentDecodingError: Error, Equatable {
    /// Fewer bytes than the header or the body it announces: the tail of a
    /// write that did not finish, or the end of the file.
    case truncated(needed: Int, available: Int)
    /// The bytes do not start with a record's magic.
    case notARecord
    case oversized(bodyBytes: Int)
    case checksumMismatch
    case malformed(String)
}

enum SegmentEncodingError: Error, Equatable {
    case oversized(bodyBytes: Int)
    /// An entry the decoder would refuse: the record is not written, so no
    /// segment ever holds what the store could not open again.
    case unreadable(String)
}

/// A batch of entries as one record: a header (magic, body length, CRC-32C
/// of length and body), then the entry count and the entries. An entry is
/// readable on its own (`decodeEntry`) at the offset and size `decode`
/// gives for it, which is what the index keeps.
enum SegmentRecord {
    private enum Flag {
        static let shouldPush: UInt8 = 1 << 0
        static let control: UInt8 = 1 << 1
        static let idempotencyKey: UInt8 = 1 << 2
        static let retiresKey: UInt8 = 1 << 3
        static let registersKey: UInt8 = 1 << 4
        static let rotatesTo: UInt8 = 1 << 5
        static let all: UInt8 = (1 << 6) - 1
    }

    /// Where the first entry of a record starts, from the record's start.
    static let firstEntryOffset = SegmentLimits.headerBytes + SegmentLimits.countBytes

    /// How many bytes `entry` takes in a record.
    static func encodedSize(of entry: LoggedEntry) -> Int {
        var size = SegmentLimits.entryFixedBytes + entry.topic.utf8.count + entry.payload.count
        entry.forEachKey { size += 4 + $0.count }
        return size
    }

    /// The record as it goes to disk: header, count, entries.
    static func encode(_ entries: [LoggedEntry]) throws(SegmentEncodingError) -> [UInt8] {
        let bodyBytes = entries.reduce(SegmentLimits.countBytes) { $0 + encodedSize(of: $1) }
        guard bodyBytes <= SegmentLimits.maxBodyBytes else { throw .oversized(bodyBytes: bodyBytes) }
        for entry in entries { try check(entry) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(SegmentLimits.headerBytes + bodyBytes)
        append(SegmentLimits.magic, to: &bytes)
        append(UInt32(bodyBytes), to: &bytes)
        append(UInt32(0), to: &bytes)  // the checksum, once the body is there
        append(UInt32(entries.count), to: &bytes)
        for entry in entries { encode(entry, to: &bytes) }
        let checksum = bytes.withUnsafeBytes {
            CRC32C.checksum(
                UnsafeRawBufferPointer(rebasing: $0[SegmentLimits.headerBytes...]),
                continuing: CRC32C.checksum(UnsafeRawBufferPointer(rebasing: $0[4..<8])))
        }
        withUnsafeBytes(of: checksum.littleEndian) { bytes.replaceSubrange(8..<12, with: $0) }
        return bytes
    }

    private static func check(_ entry: LoggedEntry) throws(SegmentEncodingError) {
        let topicBytes = entry.topic.utf8.count
        guard entry.seq > 0 else { throw .unreadable("seq \(entry.seq)") }
        guard topicBytes > 0, topicBytes <= SegmentLimits.maxTopicBytes else {
            throw .unreadable("a topic of \(topicBytes) bytes")
        }
        guard entry.payload.count <= SegmentLimits.maxPayloadBytes else {
            throw .unreadable("a payload of \(entry.payload.count) bytes")
        }
        var longest = 0
        entry.forEachKey { longest = max(longest, $0.count) }
        if longest > SegmentLimits.maxKeyBytes { throw .unreadable("a key of \(longest) bytes") }
    }

    private static func encode(_ entry: LoggedEntry, to bytes: inout [UInt8]) {
        var flags: UInt8 = 0
        if entry.shouldPush { flags |= Flag.shouldPush }
        if entry.control { flags |= Flag.control }
        if entry.idempotencyKey != nil { flags |= Flag.idempotencyKey }
        if entry.retiresKey != nil { flags |= Flag.retiresKey }
        if entry.registersKey != nil { flags |= Flag.registersKey }
        if entry.rotatesTo != nil { flags |= Flag.rotatesTo }
        bytes.append(flags)
        append(UInt64(bitPattern: entry.seq), to: &bytes)
        append(UInt64(bitPattern: entry.serverTime), to: &bytes)
        append(UInt64(bitPattern: entry.expiresAt), to: &bytes)
        appendBlob(entry.topic.utf8, to: &bytes)
        appendBlob(entry.payload, to: &bytes)
        entry.forEachKey { appendBlob($0, to: &bytes) }
    }

    /// The record at the start of `bytes`: its entries with their offsets
    /// and sizes from the record's start, and how many bytes it takes.
    static func decode(
        _ bytes: UnsafeRawBufferPointer
    ) throws(SegmentDecodingError) -> (entries: [(entry: LoggedEntry, offset: Int, size: Int)], size: Int) {
        let header = SegmentLimits.headerBytes
        guard bytes.count >= header else { throw .truncated(needed: header, available: bytes.count) }
        guard UInt32(littleEndian: bytes.loadUnaligned(as: UInt32.self)) == SegmentLimits.magic else {
            throw .notARecord
        }
        let bodyBytes = Int(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: 4, as: UInt32.self)))
        guard bodyBytes <= SegmentLimits.maxBodyBytes else { throw .oversized(bodyBytes: bodyBytes) }
        guard bytes.count - header >= bodyBytes else {
            throw .truncated(needed: header + bodyBytes, available: bytes.count)
        }
        let stored = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt32.self))
        let body = UnsafeRawBufferPointer(rebasing: bytes[header..<(header + bodyBytes)])
        guard
            CRC32C.checksum(body, continuing: CRC32C.checksum(UnsafeRawBufferPointer(rebasing: bytes[4..<8])))
                == stored
        else { throw .checksumMismatch }
        var reader = Reader(bytes: body)
        let count = Int(try reader.uint32())
        guard count <= body.count / SegmentLimits.entryFixedBytes else {
            throw .malformed("\(count) entries cannot fit in \(body.count) bytes")
        }
        var entries: [(entry: LoggedEntry, offset: Int, size: Int)] = []
        entries.reserveCapacity(count)
        for _ in 0..<count {
            let start = reader.offset
            let entry = try reader.entry()
            entries.append((entry, header + start, reader.offset - start))
        }
        guard reader.isAtEnd else { throw .malformed("\(body.count - reader.offset) bytes follow the last entry") }
        return (entries, header + bodyBytes)
    }

    /// One entry read back at the offset and size the index keeps. Its
    /// record's checksum was checked when the store opened.
    static func decodeEntry(_ bytes: UnsafeRawBufferPointer) throws(SegmentDecodingError) -> LoggedEntry {
        var reader = Reader(bytes: bytes)
        let entry = try reader.entry()
        guard reader.isAtEnd else { throw .malformed("\(bytes.count - reader.offset) bytes follow the entry") }
        return entry
    }

    private static func append<Integer: FixedWidthInteger>(_ value: Integer, to bytes: inout [UInt8]) {
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    private static func appendBlob<Bytes: Collection<UInt8>>(_ blob: Bytes, to bytes: inout [UInt8]) {
        append(UInt32(blob.count), to: &bytes)
        bytes.append(contentsOf: blob)
    }

    /// Reads a body front to back; every length is checked against what is
    /// left before anything is copied.
    private struct Reader {
        let bytes: UnsafeRawBufferPointer
        var offset = 0

        var isAtEnd: Bool { offset == bytes.count }

        mutating func uint32() throws(SegmentDecodingError) -> UInt32 {
            try need(4, for: "a length")
            defer { offset += 4 }
            return UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
        }

        mutating func int64() throws(SegmentDecodingError) -> Int64 {
            try need(8, for: "a number")
            defer { offset += 8 }
            return Int64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: Int64.self))
        }

        mutating func blob(limit: Int, _ what: String) throws(SegmentDecodingError) -> Data {
            let length = Int(try uint32())
            guard length <= limit else { throw .malformed("\(what) of \(length) bytes is over \(limit)") }
            try need(length, for: what)
            defer { offset += length }
            return Data(UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + length)]))
        }

        mutating func entry() throws(SegmentDecodingError) -> LoggedEntry {
            try need(1, for: "an entry")
            let flags = bytes[offset]
            offset += 1
            guard flags & ~Flag.all == 0 else { throw .malformed("unknown entry flags \(flags)") }
            let seq = try int64()
            let serverTime = try int64()
            let expiresAt = try int64()
            guard seq > 0 else { throw .malformed("an entry's seq is \(seq)") }
            let topicBytes = try blob(limit: SegmentLimits.maxTopicBytes, "a topic")
            guard let topic = String(validating: topicBytes, as: UTF8.self), !topic.isEmpty else {
                throw .malformed("a topic is not UTF-8")
            }
            let payload = try blob(limit: SegmentLimits.maxPayloadBytes, "a payload")
            func optional(_ flag: UInt8, _ what: String) throws(SegmentDecodingError) -> Data? {
                flags & flag == 0 ? nil : try blob(limit: SegmentLimits.maxKeyBytes, what)
            }
            return LoggedEntry(
                topic: topic, seq: seq, serverTime: serverTime, expiresAt: expiresAt, payload: payload,
                shouldPush: flags & Flag.shouldPush != 0, control: flags & Flag.control != 0,
                idempotencyKey: try optional(Flag.idempotencyKey, "an idempotency key"),
                retiresKey: try optional(Flag.retiresKey, "a retired key"),
                registersKey: try optional(Flag.registersKey, "a founding key"),
                rotatesTo: try optional(Flag.rotatesTo, "a new key"))
        }

        private func need(_ count: Int, for what: String) throws(SegmentDecodingError) {
            guard bytes.count - offset >= count else {
                throw .malformed("\(what) runs past the end of the record")
            }
        }
    }
}
