import Foundation
import RallyTestSupport
import Testing

@testable import RallyRelay

/// The segment log's on-disk record (ADR 0030): the CRC-32C that tells a
/// whole record from a torn one, the encoder, and a decoder that meets
/// damaged, truncated and hostile bytes with a typed error and never a crash.
@Suite("Segment records: the on-disk codec and its CRC-32C", .timeLimit(.minutes(1)))
struct SegmentRecordTests {
    // MARK: CRC-32C

    @Test("CRC-32C gives the published check values: \"123456789\", 32 zeros, 32 0xFF bytes, 0 up to 31, 31 down to 0")
    func crcKnownVectors() {
        #expect(CRC32C.checksum(Array("123456789".utf8)) == 0xE306_9283)
        #expect(CRC32C.checksum([UInt8](repeating: 0, count: 32)) == 0x8A91_36AA)
        #expect(CRC32C.checksum([UInt8](repeating: 0xFF, count: 32)) == 0x62A8_AB43)
        #expect(CRC32C.checksum((0..<32).map { UInt8($0) }) == 0x46DD_794E)
        #expect(CRC32C.checksum((0..<32).reversed().map { UInt8($0) }) == 0x113F_DB5C)
    }

    @Test("the checksum of nothing is 0, and continuing over nothing keeps the checksum it continues")
    func crcOfNothing() {
        #expect(CRC32C.checksum([UInt8]()) == 0)
        #expect(CRC32C.checksum(UnsafeRawBufferPointer(start: nil, count: 0), continuing: 0xE306_9283) == 0xE306_9283)
    }

    @Test(
        "a checksum continued over the second half from the first half's equals the checksum of the whole, at every split"
    )
    func crcContinues() {
        var generator = SeededGenerator(seed: 0xC3C3_2C00)
        let bytes = (0..<100).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        let whole = CRC32C.checksum(bytes)
        bytes.withUnsafeBytes { buffer in
            for split in 0...bytes.count {
                let first = CRC32C.checksum(UnsafeRawBufferPointer(rebasing: buffer[..<split]))
                let continued = CRC32C.checksum(UnsafeRawBufferPointer(rebasing: buffer[split...]), continuing: first)
                #expect(continued == whole, "split at \(split)")
            }
        }
        let nine = Array("123456789".utf8)
        let firstFour = CRC32C.checksum(nine[..<4])
        #expect(nine[4...].withUnsafeBytes { CRC32C.checksum($0, continuing: firstFour) } == 0xE306_9283)
    }

    @Test("the checksum of bytes does not depend on where in memory they start")
    func crcUnaligned() {
        var generator = SeededGenerator(seed: 0xA119_0ED)
        let bytes = (0..<80).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        bytes.withUnsafeBytes { buffer in
            for start in 0..<8 {
                for end in (bytes.count - 8)...bytes.count {
                    let inPlace = CRC32C.checksum(UnsafeRawBufferPointer(rebasing: buffer[start..<end]))
                    #expect(inPlace == CRC32C.checksum(Array(bytes[start..<end])), "bytes \(start)..<\(end)")
                }
            }
        }
    }

    @Test("this machine's processor computes the checksum with its CRC-32C instruction where it has one")
    func crcUsesTheInstruction() throws {
        #if arch(x86_64) && os(Linux)
            let flags = try String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)
            #expect(CRC32C.usesHardware == flags.contains(" sse4_2"))
        #elseif arch(x86_64) || (arch(arm64) && os(macOS))
            // Every x86-64 Mac has SSE 4.2, every Apple silicon Mac the CRC extension.
            #expect(CRC32C.usesHardware)
        #endif
    }

    @Test(
        "the instruction's checksum equals slicing by eight for every length up to 300, from every start in a word, and continued from any value"
    )
    func crcInstructionMatchesTables() {
        var generator = SeededGenerator(seed: 0x5EC7_0C2C)
        let bytes = (0..<(300 + 8)).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        bytes.withUnsafeBytes { buffer in
            for start in 0..<8 {
                for count in 0...300 {
                    let slice = UnsafeRawBufferPointer(rebasing: buffer[start..<(start + count)])
                    let previous = UInt32.random(in: .min ... .max, using: &generator)
                    #expect(CRC32C.checksum(slice) == CRC32C.tableChecksum(slice), "\(count) bytes from \(start)")
                    #expect(
                        CRC32C.checksum(slice, continuing: previous)
                            == CRC32C.tableChecksum(slice, continuing: previous),
                        "\(count) bytes from \(start), continuing \(previous)")
                }
            }
        }
        // A record of a megabyte, as a busy commit writes.
        let large = (0..<(1 << 20)).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        large.withUnsafeBytes { #expect(CRC32C.checksum($0) == CRC32C.tableChecksum($0)) }
    }

    // MARK: Round trips

    @Test(
        "entries with every optional field set and unset come back equal, each at an offset and size it decodes from alone"
    )
    func roundTrip() throws {
        let bytes = try SegmentRecord.encode(sampleEntries)
        #expect(Array(bytes[0..<4]) == Array("RES1".utf8))
        #expect(Array(bytes[4..<8]) == littleEndian(UInt32(bytes.count - SegmentLimits.headerBytes)))
        #expect(Array(bytes[12..<16]) == littleEndian(UInt32(sampleEntries.count)))

        let decoded = try decode(bytes)
        #expect(decoded.entries.map(\.entry) == sampleEntries)
        #expect(decoded.size == bytes.count)
        #expect(decoded.entries.first?.offset == SegmentRecord.firstEntryOffset)
        #expect(SegmentRecord.firstEntryOffset == 16)
        var expectedOffset = SegmentRecord.firstEntryOffset
        for (original, (entry, offset, size)) in zip(sampleEntries, decoded.entries) {
            #expect(entry == original)
            #expect(offset == expectedOffset)
            #expect(size == SegmentRecord.encodedSize(of: original))
            #expect(try decodeEntry(bytes, offset..<(offset + size)) == original)
            expectedOffset += size
        }
        #expect(expectedOffset == bytes.count)
    }

    @Test("an empty idempotency or access key is kept apart from no key at all")
    func emptyKeyIsNotNoKey() throws {
        var entry = LoggedEntry(
            topic: "group/a", seq: 1, serverTime: 1, expiresAt: 0, payload: Data(), shouldPush: false, control: false)
        for field in [\LoggedEntry.idempotencyKey, \.retiresKey, \.registersKey, \.rotatesTo] {
            entry[keyPath: field] = Data()
            let decoded = try decode(try SegmentRecord.encode([entry])).entries.map(\.entry)
            #expect(decoded == [entry])
            #expect(decoded.first?[keyPath: field] == Data())
        }
    }

    @Test("an empty batch is a 16-byte record that decodes to no entries")
    func emptyBatch() throws {
        let bytes = try SegmentRecord.encode([])
        #expect(bytes.count == SegmentRecord.firstEntryOffset)
        let decoded = try decode(bytes)
        #expect(decoded.entries.isEmpty)
        #expect(decoded.size == bytes.count)
    }

    @Test("a topic, keys and a payload exactly at their limits are written and read back")
    func limitsAreInclusive() throws {
        let entry = LoggedEntry(
            topic: String(repeating: "é", count: SegmentLimits.maxTopicBytes / 2), seq: 9, serverTime: 5,
            expiresAt: 6, payload: Data(repeating: 0x5A, count: SegmentLimits.maxPayloadBytes), shouldPush: true,
            control: true, idempotencyKey: Data(repeating: 1, count: SegmentLimits.maxKeyBytes),
            retiresKey: Data(repeating: 2, count: SegmentLimits.maxKeyBytes),
            registersKey: Data(repeating: 3, count: SegmentLimits.maxKeyBytes),
            rotatesTo: Data(repeating: 4, count: SegmentLimits.maxKeyBytes))
        #expect(entry.topic.utf8.count == SegmentLimits.maxTopicBytes)
        let bytes = try SegmentRecord.encode([entry])
        let decoded = try decode(bytes)
        #expect(decoded.entries.map(\.entry) == [entry])
        #expect(decoded.size == bytes.count)
        #expect(decoded.entries.first?.size == SegmentRecord.encodedSize(of: entry))
    }

    @Test(
        "of two records back to back the first decodes to its own size, where the second starts; zeros after are not a record"
    )
    func recordsBackToBack() throws {
        let first = try SegmentRecord.encode(Array(sampleEntries.prefix(2)))
        let second = try SegmentRecord.encode(Array(sampleEntries.suffix(3)))
        let segment = first + second + [UInt8](repeating: 0, count: 64)

        let one = try decode(segment)
        #expect(one.size == first.count)
        #expect(one.entries.map(\.entry) == Array(sampleEntries.prefix(2)))
        let two = try decode(segment, from: one.size)
        #expect(two.size == second.count)
        #expect(two.entries.map(\.entry) == Array(sampleEntries.suffix(3)))
        // Offsets count from the record's own start.
        #expect(two.entries.first?.offset == SegmentRecord.firstEntryOffset)
        for (entry, offset, size) in two.entries {
            let start = one.size + offset
            #expect(try decodeEntry(segment, start..<(start + size)) == entry)
        }
        #expect(throws: SegmentDecodingError.notARecord) {
            _ = try decode(segment, from: one.size + two.size)
        }
    }

    // MARK: Truncated, not a record, oversized

    @Test("every prefix shorter than a record is truncated, naming the bytes it needs and the bytes there are")
    func everyPrefixIsTruncated() throws {
        let bytes = try SegmentRecord.encode(sampleEntries)
        for length in 0..<bytes.count {
            let expected: SegmentDecodingError =
                length < SegmentLimits.headerBytes
                ? .truncated(needed: SegmentLimits.headerBytes, available: length)
                : .truncated(needed: bytes.count, available: length)
            #expect(throws: expected) { _ = try decode(Array(bytes[..<length])) }
        }
    }

    @Test("zeros, another magic, a byte-swapped magic and any change to the magic are not a record")
    func notARecord() throws {
        #expect(throws: SegmentDecodingError.notARecord) {
            _ = try decode([UInt8](repeating: 0, count: SegmentLimits.headerBytes))
        }
        #expect(throws: SegmentDecodingError.notARecord) { _ = try decode([UInt8](repeating: 0, count: 4096)) }
        let bytes = try SegmentRecord.encode(sampleEntries)
        var other = bytes
        other[3] = UInt8(ascii: "2")
        #expect(throws: SegmentDecodingError.notARecord) { _ = try decode(other) }
        let swapped = littleEndian(SegmentLimits.magic.byteSwapped) + bytes[4...]
        #expect(throws: SegmentDecodingError.notARecord) { _ = try decode(swapped) }
        for position in 0..<4 {
            for mask: UInt8 in [0x01, 0x80, 0xFF] {
                var damaged = bytes
                damaged[position] ^= mask
                #expect(throws: SegmentDecodingError.notARecord) { _ = try decode(damaged) }
            }
        }
    }

    @Test(
        "a header announcing a body over maxBodyBytes is oversized though no body follows; one at the limit is truncated"
    )
    func oversizedHeader() {
        for bodyBytes in [SegmentLimits.maxBodyBytes + 1, SegmentLimits.maxBodyBytes * 2, Int(UInt32.max)] {
            let header = littleEndian(SegmentLimits.magic) + littleEndian(UInt32(bodyBytes)) + [0, 0, 0, 0]
            #expect(throws: SegmentDecodingError.oversized(bodyBytes: bodyBytes)) { _ = try decode(header) }
        }
        let atTheLimit =
            littleEndian(SegmentLimits.magic) + littleEndian(UInt32(SegmentLimits.maxBodyBytes)) + [0, 0, 0, 0]
        #expect(
            throws: SegmentDecodingError.truncated(
                needed: SegmentLimits.headerBytes + SegmentLimits.maxBodyBytes, available: SegmentLimits.headerBytes)
        ) { _ = try decode(atTheLimit) }
    }

    // MARK: Checksum

    @Test("changing any byte of the checksum or the body is a checksum mismatch")
    func bodyDamageIsCaught() throws {
        let bytes = try SegmentRecord.encode(sampleEntries)
        for position in 8..<bytes.count {
            for mask: UInt8 in [0x01, 0x80, 0xFF] {
                var damaged = bytes
                damaged[position] ^= mask
                #expect(throws: SegmentDecodingError.checksumMismatch, "byte \(position) ^ \(mask)") {
                    _ = try decode(damaged)
                }
            }
        }
    }

    @Test(
        "changing a byte of the length field is caught: a checksum mismatch, or truncated or oversized when the body it announces is not there"
    )
    func lengthDamageIsCaught() throws {
        let record = try SegmentRecord.encode(sampleEntries)
        // As in a segment, where zeros follow the last record, and with the
        // record alone.
        for padding in [0, 512] {
            let bytes = record + [UInt8](repeating: 0, count: padding)
            for position in 4..<8 {
                for mask: UInt8 in [0x01, 0x02, 0x80, 0xFF] {
                    var damaged = bytes
                    damaged[position] ^= mask
                    let announced = Int(readUInt32(damaged, at: 4))
                    let expected: SegmentDecodingError =
                        if announced > SegmentLimits.maxBodyBytes {
                            .oversized(bodyBytes: announced)
                        } else if SegmentLimits.headerBytes + announced > bytes.count {
                            .truncated(needed: SegmentLimits.headerBytes + announced, available: bytes.count)
                        } else {
                            .checksumMismatch
                        }
                    #expect(throws: expected, "byte \(position) ^ \(mask), padding \(padding)") {
                        _ = try decode(damaged)
                    }
                }
            }
        }
    }

    // MARK: Malformed bodies with a valid checksum

    @Test("a record built by hand with a valid checksum is the encoder's record byte for byte, and decodes")
    func handBuiltBaseline() throws {
        let raw = RawEntry(flags: 0b11_1111, keys: [[1], [2, 2], [], [4, 4, 4, 4]])
        let entry = LoggedEntry(
            topic: "group/a", seq: 7, serverTime: 1_000, expiresAt: 0, payload: Data("hi".utf8), shouldPush: true,
            control: true, idempotencyKey: Data([1]), retiresKey: Data([2, 2]), registersKey: Data(),
            rotatesTo: Data([4, 4, 4, 4]))
        let bytes = record(entries: [raw, RawEntry()])
        let plain = LoggedEntry(
            topic: "group/a", seq: 7, serverTime: 1_000, expiresAt: 0, payload: Data("hi".utf8), shouldPush: false,
            control: false)
        #expect(bytes == (try SegmentRecord.encode([entry, plain])))
        #expect(try decode(bytes).entries.map(\.entry) == [entry, plain])
    }

    @Test("an entry count larger than the body could hold is malformed")
    func countTooLarge() {
        expectMalformed(record(count: 2, entries: [RawEntry()]), mentioning: "cannot fit")
        expectMalformed(record(count: Int(UInt32.max), entries: [RawEntry()]), mentioning: "cannot fit")
        expectMalformed(record(count: 1, entries: []), mentioning: "cannot fit")
    }

    @Test("flag bits beyond the six an entry defines are malformed")
    func unknownFlags() {
        for flags: UInt8 in [1 << 6, 1 << 7, 0xFF, 0b0100_0001] {
            expectMalformed(record(entries: [RawEntry(flags: flags)]), mentioning: "flags")
        }
    }

    @Test("a seq of 0 or below is malformed")
    func nonPositiveSeq() {
        for seq: Int64 in [0, -1, .min] {
            expectMalformed(record(entries: [RawEntry(seq: seq)]), mentioning: "seq")
        }
    }

    @Test("a topic or payload announcing more than its limit is malformed, before the bytes are looked for")
    func topicOverLimit() {
        let over = SegmentLimits.maxTopicBytes + 1
        expectMalformed(record(entries: [RawEntry(topic: Array(repeating: 0x61, count: over))]), mentioning: "over")
        // The length alone, with nothing after it.
        var body = littleEndian(UInt32(1)) + RawEntry().bytes.prefix(SegmentLimits.entryFixedBytes - 8)
        body += littleEndian(UInt32.max)
        body += [UInt8](repeating: 0, count: 8)
        expectMalformed(record(body: body), mentioning: "a topic of 4294967295 bytes")
        let payload = RawEntry(payload: [], payloadLength: UInt32(SegmentLimits.maxPayloadBytes + 1))
        expectMalformed(record(entries: [payload]), mentioning: "over")
    }

    @Test("an empty topic is malformed")
    func emptyTopic() {
        expectMalformed(record(entries: [RawEntry(topic: [])]), mentioning: "topic")
    }

    @Test("a topic that is not UTF-8 is malformed")
    func topicNotUTF8() {
        let topics: [[UInt8]] = [
            [0xFF], [0x80], [0xC3], [0xC0, 0x80], [0xED, 0xA0, 0x80], Array("group/".utf8) + [0xFE],
        ]
        for topic in topics {
            expectMalformed(record(entries: [RawEntry(topic: topic)]), mentioning: "UTF-8")
        }
    }

    @Test("a key over maxKeyBytes is malformed in each of the four key fields")
    func keyOverLimit() {
        let over = [UInt8](repeating: 7, count: SegmentLimits.maxKeyBytes + 1)
        for bit in 2...5 {
            expectMalformed(record(entries: [RawEntry(flags: 1 << bit, keys: [over])]), mentioning: "over")
            // With the keys before it present.
            let before = [[UInt8]](repeating: [1], count: bit - 2)
            let flags = UInt8((1 << (bit + 1)) - 4)
            expectMalformed(record(entries: [RawEntry(flags: flags, keys: before + [over])]), mentioning: "over")
        }
    }

    @Test("a length or entry running past the end of the body is malformed")
    func runsPastTheEnd() {
        expectMalformed(record(entries: [RawEntry(payloadLength: 100)]), mentioning: "past the end")
        // A key its flag announces that is not there, or is cut short.
        expectMalformed(record(entries: [RawEntry(flags: 1 << 2)]), mentioning: "past the end")
        expectMalformed(
            record(
                body: littleEndian(UInt32(1)) + RawEntry(flags: 1 << 3).bytes + littleEndian(UInt32(10)) + [1, 2, 3]),
            mentioning: "past the end")
        // A body too short for its own entry count.
        expectMalformed(record(body: []), mentioning: "past the end")
        expectMalformed(record(body: [0, 0]), mentioning: "past the end")
        // The second of two entries cut at every length: until the body is
        // long enough for two entries' fixed parts, the count cannot fit.
        let first = RawEntry().bytes
        let second = RawEntry(flags: 0b11_1100, keys: [[1], [2], [3], [4]]).bytes
        for cut in 0..<second.count {
            let body = littleEndian(UInt32(2)) + first + second[..<cut]
            let fits = body.count / SegmentLimits.entryFixedBytes >= 2
            expectMalformed(record(body: body), mentioning: fits ? "past the end" : "cannot fit")
        }
    }

    @Test("bytes after the last entry are malformed")
    func trailingBytes() throws {
        let encoded = try SegmentRecord.encode(sampleEntries)
        for extra in [[0], [1, 2, 3, 4, 5], [UInt8](repeating: 0, count: 100)] as [[UInt8]] {
            expectMalformed(record(body: Array(encoded[SegmentLimits.headerBytes...]) + extra), mentioning: "follow")
        }
        expectMalformed(record(count: 0, entries: [RawEntry()]), mentioning: "follow")
    }

    // MARK: One entry alone

    @Test("decodeEntry refuses an entry with bytes after it as malformed")
    func decodeEntryTrailing() throws {
        let bytes = try SegmentRecord.encode(sampleEntries)
        for (_, offset, size) in try decode(bytes).entries {
            let alone = Array(bytes[offset..<(offset + size)])
            for extra in [[0], [0x61, 0x62]] as [[UInt8]] {
                let error = entryDecodingError(alone + extra, 0..<(size + extra.count))
                guard case .malformed(let reason) = error else {
                    Issue.record("expected malformed, got \(String(describing: error))")
                    continue
                }
                #expect(reason.contains("follow"), "\(reason)")
            }
        }
    }

    @Test("decodeEntry refuses every cut-short entry as malformed")
    func decodeEntryTruncated() throws {
        let bytes = try SegmentRecord.encode(sampleEntries)
        for (_, offset, size) in try decode(bytes).entries {
            for cut in 0..<size {
                let error = entryDecodingError(bytes, offset..<(offset + cut))
                guard case .malformed(let reason) = error else {
                    Issue.record("entry at \(offset) cut to \(cut) bytes: \(String(describing: error))")
                    continue
                }
                #expect(reason.contains("past the end"), "\(reason)")
            }
        }
    }

    // MARK: The encoder

    @Test(
        "the encoder refuses as unreadable what the decoder would refuse: a seq of 0 or below, an empty topic, a topic over maxTopicBytes, a payload over maxPayloadBytes, a key over maxKeyBytes"
    )
    func encoderRefusesUnreadable() {
        let good = LoggedEntry(
            topic: "group/a", seq: 1, serverTime: 1, expiresAt: 0, payload: Data(), shouldPush: false, control: false)
        let overKey = Data(repeating: 9, count: SegmentLimits.maxKeyBytes + 1)
        let changes: [(String, (inout LoggedEntry) -> Void)] = [
            ("seq 0", { $0.seq = 0 }),
            ("seq -1", { $0.seq = -1 }),
            ("seq \(Int64.min)", { $0.seq = .min }),
            ("topic of 0 bytes", { $0.topic = "" }),
            ("topic of 4097 bytes", { $0.topic = String(repeating: "a", count: SegmentLimits.maxTopicBytes + 1) }),
            ("topic of 4098 bytes", { $0.topic = String(repeating: "é", count: SegmentLimits.maxTopicBytes / 2 + 1) }),
            (
                "payload of \(SegmentLimits.maxPayloadBytes + 1) bytes",
                { $0.payload = Data(count: SegmentLimits.maxPayloadBytes + 1) }
            ),
            ("key of 4097 bytes", { $0.idempotencyKey = overKey }),
            ("key of 4097 bytes", { $0.retiresKey = overKey }),
            ("key of 4097 bytes", { $0.registersKey = overKey }),
            ("key of 4097 bytes", { $0.rotatesTo = overKey }),
        ]
        for (words, change) in changes {
            var bad = good
            change(&bad)
            // Alone, and after an entry that is fine: the batch is refused whole.
            for batch in [[bad], [good, bad]] {
                let error = #expect(throws: SegmentEncodingError.self) { _ = try SegmentRecord.encode(batch) }
                guard case .unreadable(let reason) = error else {
                    Issue.record("\(words): expected unreadable, got \(String(describing: error))")
                    continue
                }
                #expect(reason.contains(words), "\(reason)")
            }
        }
    }

    @Test("the encoder refuses a batch whose body would pass maxBodyBytes as oversized")
    func encoderRefusesOversized() {
        // Sixty-four copies of one 16 MiB payload: Data shares the bytes.
        let payload = Data(count: SegmentLimits.maxPayloadBytes)
        let entry = LoggedEntry(
            topic: "a", seq: 1, serverTime: 1, expiresAt: 0, payload: payload, shouldPush: false, control: false)
        let batch = [LoggedEntry](repeating: entry, count: 64)
        let bodyBytes = SegmentLimits.countBytes + 64 * (SegmentLimits.entryFixedBytes + 1 + payload.count)
        #expect(bodyBytes > SegmentLimits.maxBodyBytes)
        #expect(throws: SegmentEncodingError.oversized(bodyBytes: bodyBytes)) { _ = try SegmentRecord.encode(batch) }
    }

    @Test("a topic the encoder writes is read back as written, a leading byte-order mark included")
    func byteOrderMarkTopic() throws {
        // Foundation's UTF-8 decoding drops a leading U+FEFF: "\u{FEFF}"
        // alone, which the encoder writes, was refused when the store opened.
        for topic in ["\u{FEFF}group/a", "\u{FEFF}"] {
            let entry = LoggedEntry(
                topic: topic, seq: 1, serverTime: 1, expiresAt: 0, payload: Data(), shouldPush: false, control: false)
            let bytes = try SegmentRecord.encode([entry])
            #expect(try decode(bytes).entries.map(\.entry) == [entry], "topic \(Array(topic.utf8))")
        }
    }

    // MARK: Hostile bytes

    @Test(
        "2,000 random buffers, some with the magic, a plausible length, a valid checksum and a small entry count, decode or throw a SegmentDecodingError, and what decodes is canonical"
    )
    func randomBuffers() throws {
        var generator = SeededGenerator(seed: 0x5E65_0030)
        var failures: [String: Int] = [:]
        var decoded = 0
        for round in 0..<2_000 {
            let length = Int.random(in: 0..<512, using: &generator)
            var bytes = (0..<length).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
            let shape = round % 4
            if shape >= 1, length >= SegmentLimits.headerBytes {
                // The magic and a body length that mostly fits, sometimes by a few bytes not.
                let bodyBytes = Int.random(in: 0...(length - SegmentLimits.headerBytes + 8), using: &generator)
                bytes.replaceSubrange(0..<4, with: littleEndian(SegmentLimits.magic))
                bytes.replaceSubrange(4..<8, with: littleEndian(UInt32(bodyBytes)))
                if shape == 3, length >= SegmentRecord.firstEntryOffset + 1 {
                    // Few entries, known flags and a positive seq: the parser goes deeper.
                    bytes.replaceSubrange(12..<16, with: littleEndian(UInt32.random(in: 0...3, using: &generator)))
                    bytes[16] &= 0b11_1111
                    if length >= 25 { bytes[24] &= 0x7F }
                }
                if shape >= 2 { bytes = sealed(bytes) }
            }
            try tally(bytes, failures: &failures, decoded: &decoded)
        }
        // The shapes reached every check the decoder makes past the header.
        for kind in ["truncated", "notARecord", "checksumMismatch", "malformed"] {
            #expect(failures[kind, default: 0] > 0, "no \(kind) among \(failures), \(decoded) decoded")
        }
    }

    @Test(
        "random changes to a valid record's body, the checksum recomputed, decode to a record that encodes to the same bytes, or throw"
    )
    func mutatedRecords() throws {
        let original = try SegmentRecord.encode(sampleEntries)
        var generator = SeededGenerator(seed: 0xB0D7_0030)
        var failures: [String: Int] = [:]
        var decoded = 0
        for round in 0..<2_000 {
            var bytes = original
            let changes = round % 5 == 0 ? Int.random(in: 2...8, using: &generator) : 1
            for _ in 0..<changes {
                let position = Int.random(in: SegmentLimits.headerBytes..<bytes.count, using: &generator)
                bytes[position] = UInt8.random(in: .min ... .max, using: &generator)
            }
            bytes = sealed(bytes)
            try tally(bytes, failures: &failures, decoded: &decoded)
        }
        #expect(decoded > 0)
        #expect(failures["malformed", default: 0] > 0)
        #expect(failures["checksumMismatch"] == nil)
        #expect(failures["truncated"] == nil)
    }
}

// MARK: - Helpers

private typealias DecodedRecord = (entries: [(entry: LoggedEntry, offset: Int, size: Int)], size: Int)

/// Entries that between them set and leave unset every optional field and
/// flag, with an empty payload, binary bytes and a topic beyond ASCII.
private let sampleEntries: [LoggedEntry] = [
    LoggedEntry(
        topic: "group/a", seq: 1, serverTime: 0, expiresAt: 0, payload: Data(), shouldPush: false, control: false),
    LoggedEntry(
        topic: "group/a", seq: 2, serverTime: 1_700_000_000_000, expiresAt: 1_700_000_060_000,
        payload: Data("hello".utf8), shouldPush: true, control: false, idempotencyKey: Data("idem-1".utf8)),
    LoggedEntry(
        topic: "inbox/x", seq: 1, serverTime: 1_700_000_000_001, expiresAt: 0, payload: Data([0]), shouldPush: false,
        control: true, registersKey: Data(repeating: 0xA1, count: 32)),
    LoggedEntry(
        topic: "group/a", seq: 3, serverTime: 1_700_000_000_002, expiresAt: 0, payload: Data("rotate".utf8),
        shouldPush: true, control: true, retiresKey: Data(repeating: 0xA1, count: 32),
        rotatesTo: Data(repeating: 0xB2, count: 32)),
    LoggedEntry(
        topic: "группа/📣/é", seq: .max, serverTime: .min, expiresAt: -1, payload: Data((0...255).map { UInt8($0) }),
        shouldPush: true, control: true, idempotencyKey: Data(), retiresKey: Data([0]), registersKey: Data([1, 2]),
        rotatesTo: Data([3, 4, 5])),
    LoggedEntry(
        topic: "a", seq: 42, serverTime: -5, expiresAt: .max, payload: Data([0, 0, 0]), shouldPush: false,
        control: false, idempotencyKey: Data(repeating: 0xFF, count: 16)),
]

/// An entry as bytes, written field by field as the format describes, so a
/// test can write what the encoder never would.
private struct RawEntry {
    var flags: UInt8 = 0
    var seq: Int64 = 7
    var serverTime: Int64 = 1_000
    var expiresAt: Int64 = 0
    var topic: [UInt8] = Array("group/a".utf8)
    var payload: [UInt8] = Array("hi".utf8)
    /// A payload length to write instead of the payload's own.
    var payloadLength: UInt32?
    /// The keys after the payload, in the order the flags give them.
    var keys: [[UInt8]] = []

    init(
        flags: UInt8 = 0, seq: Int64 = 7, topic: [UInt8] = Array("group/a".utf8),
        payload: [UInt8] = Array("hi".utf8), payloadLength: UInt32? = nil, keys: [[UInt8]] = []
    ) {
        self.flags = flags
        self.seq = seq
        self.topic = topic
        self.payload = payload
        self.payloadLength = payloadLength
        self.keys = keys
    }

    var bytes: [UInt8] {
        var bytes = [flags]
        for value in [seq, serverTime, expiresAt] { bytes += littleEndian(value) }
        bytes += littleEndian(UInt32(topic.count)) + topic
        bytes += littleEndian(payloadLength ?? UInt32(payload.count)) + payload
        for key in keys { bytes += littleEndian(UInt32(key.count)) + key }
        return bytes
    }
}

/// A record of `entries` under an entry count of `count` (theirs unless
/// given), with a valid checksum.
private func record(count: Int? = nil, entries: [RawEntry]) -> [UInt8] {
    record(body: littleEndian(UInt32(count ?? entries.count)) + entries.flatMap(\.bytes))
}

/// A record around `body`, with a valid checksum so the decoder reaches it.
private func record(body: [UInt8]) -> [UInt8] {
    sealed(littleEndian(SegmentLimits.magic) + littleEndian(UInt32(body.count)) + [0, 0, 0, 0] + body)
}

/// `bytes` with the checksum the encoder would give the length and the body
/// (as much of it as is there) they hold.
private func sealed(_ bytes: [UInt8]) -> [UInt8] {
    var bytes = bytes
    let bodyBytes = Int(readUInt32(bytes, at: 4))
    let body = Array(bytes[SegmentLimits.headerBytes..<min(bytes.count, SegmentLimits.headerBytes + bodyBytes)])
    let checksum = body.withUnsafeBytes { CRC32C.checksum($0, continuing: CRC32C.checksum(bytes[4..<8])) }
    bytes.replaceSubrange(8..<12, with: littleEndian(checksum))
    return bytes
}

private func littleEndian<Integer: FixedWidthInteger>(_ value: Integer) -> [UInt8] {
    withUnsafeBytes(of: value.littleEndian) { Array($0) }
}

private func readUInt32(_ bytes: [UInt8], at offset: Int) -> UInt32 {
    bytes.withUnsafeBytes { UInt32(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: UInt32.self)) }
}

/// The record at `start` in `bytes`, read in place.
private func decode(_ bytes: [UInt8], from start: Int = 0) throws(SegmentDecodingError) -> DecodedRecord {
    try bytes.withUnsafeBytes { buffer in
        Result { () throws(SegmentDecodingError) in
            try SegmentRecord.decode(UnsafeRawBufferPointer(rebasing: buffer[start...]))
        }
    }.get()
}

/// The entry at `range` in `bytes`, read in place as the index reads it.
private func decodeEntry(_ bytes: [UInt8], _ range: Range<Int>) throws(SegmentDecodingError) -> LoggedEntry {
    try bytes.withUnsafeBytes { buffer in
        Result { () throws(SegmentDecodingError) in
            try SegmentRecord.decodeEntry(UnsafeRawBufferPointer(rebasing: buffer[range]))
        }
    }.get()
}

private func decodingError(_ bytes: [UInt8]) -> SegmentDecodingError? {
    do {
        _ = try decode(bytes)
        return nil
    } catch {
        return error
    }
}

private func entryDecodingError(_ bytes: [UInt8], _ range: Range<Int>) -> SegmentDecodingError? {
    do {
        _ = try decodeEntry(bytes, range)
        return nil
    } catch {
        return error
    }
}

/// Decoding `bytes` throws `.malformed`, for a reason that mentions `words`.
private func expectMalformed(
    _ bytes: [UInt8], mentioning words: String, sourceLocation: SourceLocation = #_sourceLocation
) {
    let error = decodingError(bytes)
    guard case .malformed(let reason) = error else {
        Issue.record("expected malformed, got \(String(describing: error))", sourceLocation: sourceLocation)
        return
    }
    #expect(reason.contains(words), "\(reason)", sourceLocation: sourceLocation)
}

private func kind(of error: SegmentDecodingError) -> String {
    switch error {
    case .truncated: "truncated"
    case .notARecord: "notARecord"
    case .oversized: "oversized"
    case .checksumMismatch: "checksumMismatch"
    case .malformed: "malformed"
    }
}

/// What decoded is a record as the encoder writes it: its entries tile it
/// from the first entry's offset, each decodes alone, and encoding them again
/// gives back the record's bytes.
private func expectCanonical(
    _ record: DecodedRecord, in bytes: [UInt8], sourceLocation: SourceLocation = #_sourceLocation
) throws {
    #expect(record.size >= SegmentRecord.firstEntryOffset, sourceLocation: sourceLocation)
    #expect(record.size <= bytes.count, sourceLocation: sourceLocation)
    var offset = SegmentRecord.firstEntryOffset
    for entry in record.entries {
        #expect(entry.offset == offset, sourceLocation: sourceLocation)
        #expect(entry.size == SegmentRecord.encodedSize(of: entry.entry), sourceLocation: sourceLocation)
        #expect(
            try decodeEntry(bytes, entry.offset..<(entry.offset + entry.size)) == entry.entry,
            sourceLocation: sourceLocation)
        offset += entry.size
    }
    #expect(offset == record.size, sourceLocation: sourceLocation)
    #expect(
        try SegmentRecord.encode(record.entries.map(\.entry)) == Array(bytes[..<record.size]),
        sourceLocation: sourceLocation)
}

/// Decodes `bytes`: a failure is counted by its kind (the decoder's typed
/// throws: whatever it throws is a SegmentDecodingError); a record must be
/// canonical.
private func tally(_ bytes: [UInt8], failures: inout [String: Int], decoded: inout Int) throws {
    let record: DecodedRecord
    do {
        record = try decode(bytes)
    } catch {
        failures[kind(of: error), default: 0] += 1
        return
    }
    try expectCanonical(record, in: bytes)
    decoded += 1
}

extension CRC32C {
    /// The checksum of a sequence: the vectors are written as arrays.
    fileprivate static func checksum(_ bytes: some Sequence<UInt8>) -> UInt32 {
        Array(bytes).withUnsafeBytes { checksum($0) }
    }
}
