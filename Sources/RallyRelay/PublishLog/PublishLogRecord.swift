import Foundation
import RallyWire

/// One batch of accepted publishes as the publish log holds it: the batch's
/// number in the log and the entries it stored, in order (ADR 0028).
struct PublishLogRecord: Sendable, Equatable {
    var number: UInt64
    var entries: [AppendedEntry]
}

/// The log's on-disk limits. A length beyond one of them is damage, not a
/// record.
enum PublishLogLimits {
    /// "RPL1": tells a record from zeros and from what an older record left.
    static let magic: UInt32 = 0x314C_5052
    /// Magic, body length, number and checksum.
    static let headerBytes = 20
    /// Far above any batch the writer forms (its queue holds at most
    /// `RelayLimits.maxWriteQueueBytes`, 64 MiB by default).
    static let maxBodyBytes = 1 << 30
    /// An entry's fixed part: flags and five 64-bit integers.
    static let entryFixedBytes = 1 + 5 * 8
    /// Longest key or idempotency key an entry may carry.
    static let maxKeyBytes = 4096
}

enum PublishLogDecodingError: Error, Equatable {
    /// Fewer bytes than the header or the body it announces: the tail of a
    /// write that did not finish, or the end of the file.
    case truncated(needed: Int, available: Int)
    /// The bytes do not start with a record's magic.
    case notARecord
    case oversized(bodyBytes: Int)
    case checksumMismatch
    case malformed(String)
}

enum PublishLogEncodingError: Error, Equatable {
    case oversized(bodyBytes: Int)
}

extension PublishLogRecord {
    private enum Flag {
        static let shouldPush: UInt8 = 1 << 0
        static let control: UInt8 = 1 << 1
        static let idempotencyKey: UInt8 = 1 << 2
        static let retiresKey: UInt8 = 1 << 3
        static let registersKey: UInt8 = 1 << 4
        static let rotatesTo: UInt8 = 1 << 5
        static let all: UInt8 = (1 << 6) - 1
    }

    /// The record as it goes to disk: header, then body.
    func encoded() throws(PublishLogEncodingError) -> [UInt8] {
        var bodyBytes = 4
        for entry in entries {
            bodyBytes += PublishLogLimits.entryFixedBytes + 8 + entry.topic.utf8.count + entry.payload.count
            for blob in [entry.idempotencyKey, entry.retiresKey, entry.registersKey, entry.rotatesTo] {
                if let blob { bodyBytes += 4 + blob.count }
            }
        }
        guard bodyBytes <= PublishLogLimits.maxBodyBytes else { throw .oversized(bodyBytes: bodyBytes) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(PublishLogLimits.headerBytes + bodyBytes)
        Self.append(PublishLogLimits.magic, to: &bytes)
        Self.append(UInt32(bodyBytes), to: &bytes)
        Self.append(number, to: &bytes)
        Self.append(UInt32(0), to: &bytes)  // the checksum, once the body is there
        Self.append(UInt32(entries.count), to: &bytes)
        for entry in entries {
            var flags: UInt8 = 0
            if entry.shouldPush { flags |= Flag.shouldPush }
            if entry.control { flags |= Flag.control }
            if entry.idempotencyKey != nil { flags |= Flag.idempotencyKey }
            if entry.retiresKey != nil { flags |= Flag.retiresKey }
            if entry.registersKey != nil { flags |= Flag.registersKey }
            if entry.rotatesTo != nil { flags |= Flag.rotatesTo }
            bytes.append(flags)
            for value in [entry.seq, entry.serverTime, entry.expiresAt, entry.bytesAfter, entry.lastControlSeqAfter] {
                Self.append(UInt64(bitPattern: value), to: &bytes)
            }
            Self.appendBlob(entry.topic.utf8, to: &bytes)
            Self.appendBlob(entry.payload, to: &bytes)
            for blob in [entry.idempotencyKey, entry.retiresKey, entry.registersKey, entry.rotatesTo] {
                if let blob { Self.appendBlob(blob, to: &bytes) }
            }
        }
        let checksum = bytes.withUnsafeBytes { CRC32C.checksum(UnsafeRawBufferPointer(rebasing: $0[4...])) }
        withUnsafeBytes(of: checksum.littleEndian) { bytes.replaceSubrange(16..<20, with: $0) }
        return bytes
    }

    /// The record at the start of `bytes` and how many bytes it takes.
    static func decode(
        _ bytes: UnsafeRawBufferPointer
    ) throws(PublishLogDecodingError) -> (record: PublishLogRecord, size: Int) {
        let header = PublishLogLimits.headerBytes
        guard bytes.count >= header else { throw .truncated(needed: header, available: bytes.count) }
        guard UInt32(littleEndian: bytes.loadUnaligned(as: UInt32.self)) == PublishLogLimits.magic else {
            throw .notARecord
        }
        let bodyBytes = Int(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: 4, as: UInt32.self)))
        guard bodyBytes <= PublishLogLimits.maxBodyBytes else { throw .oversized(bodyBytes: bodyBytes) }
        guard bytes.count - header >= bodyBytes else {
            throw .truncated(needed: header + bodyBytes, available: bytes.count)
        }
        let stored = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: 16, as: UInt32.self))
        let covered = UnsafeRawBufferPointer(rebasing: bytes[4..<16])
        let body = UnsafeRawBufferPointer(rebasing: bytes[header..<(header + bodyBytes)])
        guard CRC32C.checksum(body, continuing: CRC32C.checksum(covered)) == stored else {
            throw .checksumMismatch
        }
        let number = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
        var reader = Reader(bytes: body)
        let count = Int(try reader.uint32())
        // Each entry takes at least its fixed part and two lengths.
        guard count <= body.count / (PublishLogLimits.entryFixedBytes + 8) else {
            throw .malformed("\(count) entries cannot fit in \(body.count) bytes")
        }
        var entries: [AppendedEntry] = []
        entries.reserveCapacity(count)
        for _ in 0..<count { entries.append(try reader.entry()) }
        guard reader.isAtEnd else { throw .malformed("\(body.count - reader.offset) bytes follow the last entry") }
        return (PublishLogRecord(number: number, entries: entries), header + bodyBytes)
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

        mutating func uint32() throws(PublishLogDecodingError) -> UInt32 {
            try need(4, for: "a length")
            defer { offset += 4 }
            return UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
        }

        mutating func int64() throws(PublishLogDecodingError) -> Int64 {
            try need(8, for: "a number")
            defer { offset += 8 }
            return Int64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: Int64.self))
        }

        mutating func blob(limit: Int, _ what: String) throws(PublishLogDecodingError) -> Data {
            let length = Int(try uint32())
            guard length <= limit else { throw .malformed("\(what) of \(length) bytes is over \(limit)") }
            try need(length, for: what)
            defer { offset += length }
            return Data(UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + length)]))
        }

        mutating func entry() throws(PublishLogDecodingError) -> AppendedEntry {
            try need(1, for: "an entry")
            let flags = bytes[offset]
            offset += 1
            guard flags & ~Flag.all == 0 else { throw .malformed("unknown entry flags \(flags)") }
            let seq = try int64()
            let serverTime = try int64()
            let expiresAt = try int64()
            let bytesAfter = try int64()
            let lastControlSeqAfter = try int64()
            guard seq > 0, bytesAfter >= 0, lastControlSeqAfter >= 0, lastControlSeqAfter <= seq else {
                throw .malformed("an entry's seq or head is out of range")
            }
            let topicBytes = try blob(limit: WireLimits.maxTopicLength, "a topic")
            guard let topic = String(data: topicBytes, encoding: .utf8), !topic.isEmpty else {
                throw .malformed("a topic is not UTF-8")
            }
            let payload = try blob(limit: WireLimits.maxPayloadBytes, "a payload")
            func optional(_ flag: UInt8, _ what: String) throws(PublishLogDecodingError) -> Data? {
                flags & flag == 0 ? nil : try blob(limit: PublishLogLimits.maxKeyBytes, what)
            }
            let idempotencyKey = try optional(Flag.idempotencyKey, "an idempotency key")
            let retiresKey = try optional(Flag.retiresKey, "a retired key")
            let registersKey = try optional(Flag.registersKey, "a founding key")
            let rotatesTo = try optional(Flag.rotatesTo, "a new key")
            return AppendedEntry(
                topic: topic, seq: seq, serverTime: serverTime, payload: payload,
                shouldPush: flags & Flag.shouldPush != 0, expiresAt: expiresAt, idempotencyKey: idempotencyKey,
                control: flags & Flag.control != 0, retiresKey: retiresKey, registersKey: registersKey,
                rotatesTo: rotatesTo, bytesAfter: bytesAfter, lastControlSeqAfter: lastControlSeqAfter)
        }

        private func need(_ count: Int, for what: String) throws(PublishLogDecodingError) {
            guard bytes.count - offset >= count else {
                throw .malformed("\(what) runs past the end of the record")
            }
        }
    }
}
