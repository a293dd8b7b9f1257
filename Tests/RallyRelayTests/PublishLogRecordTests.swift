import Foundation
import RallyWire
import Testing

@testable import RallyRelay

/// The publish log's record format (ADR 0028): its checksum, its round trip,
/// and what it does with torn, damaged and hostile bytes.
@Suite("Publish log records")
struct PublishLogRecordTests {
    // MARK: Helpers

    /// CRC-32C one bit at a time: the definition the sliced version must match.
    static func referenceCRC(_ bytes: some Sequence<UInt8>, continuing previous: UInt32 = 0) -> UInt32 {
        var crc = ~previous
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
        }
        return ~crc
    }

    /// A seeded generator, so every run sees the same bytes.
    struct SplitMix64 {
        var state: UInt64

        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }

        /// A number in 0..<bound.
        mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }

        mutating func bytes(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8(truncatingIfNeeded: next()) } }
    }

    /// Little-endian fields, as the record format writes them.
    struct Writer {
        var bytes: [UInt8] = []

        mutating func u8(_ value: UInt8) { bytes.append(value) }
        mutating func u32(_ value: UInt32) { withUnsafeBytes(of: value.littleEndian) { bytes += $0 } }
        mutating func u64(_ value: UInt64) { withUnsafeBytes(of: value.littleEndian) { bytes += $0 } }
        mutating func i64(_ value: Int64) { u64(UInt64(bitPattern: value)) }
        /// A length and then `blob`; `length` overrides the length written.
        mutating func blob(_ blob: [UInt8], length: UInt32? = nil) {
            u32(length ?? UInt32(blob.count))
            bytes += blob
        }
    }

    /// `body` framed as a record, exactly as `PublishLogRecord.encoded` frames
    /// one: magic, body length, number, then CRC-32C over bytes 4..<16 and the
    /// body.
    static func frame(_ body: [UInt8], number: UInt64 = 1, length: UInt32? = nil) -> [UInt8] {
        var header = Writer()
        header.u32(0x314C_5052)
        header.u32(length ?? UInt32(body.count))
        header.u64(number)
        let checksum = body.withUnsafeBytes { CRC32C.checksum($0, continuing: CRC32C.checksum(header.bytes[4..<16])) }
        header.u32(checksum)
        return header.bytes + body
    }

    /// One entry's bytes, written by hand.
    static func entryBytes(
        flags: UInt8 = 0, seq: Int64 = 1, serverTime: Int64 = 1_700_000_000_000, expiresAt: Int64 = 0,
        bytesAfter: Int64 = 3, lastControlSeqAfter: Int64 = 0, topic: [UInt8] = Array("inbox/a".utf8),
        payload: [UInt8] = [1, 2, 3], keys: [[UInt8]] = []
    ) -> [UInt8] {
        var writer = Writer()
        writer.u8(flags)
        for value in [seq, serverTime, expiresAt, bytesAfter, lastControlSeqAfter] { writer.i64(value) }
        writer.blob(topic)
        writer.blob(payload)
        for key in keys { writer.blob(key) }
        return writer.bytes
    }

    /// A body: an entry count, then `entries` and `trailing` as they are.
    static func body(count: UInt32? = nil, _ entries: [[UInt8]], trailing: [UInt8] = []) -> [UInt8] {
        var writer = Writer()
        writer.u32(count ?? UInt32(entries.count))
        return writer.bytes + entries.flatMap { $0 } + trailing
    }

    static func decode(_ bytes: [UInt8]) -> Result<(record: PublishLogRecord, size: Int), PublishLogDecodingError> {
        bytes.withUnsafeBytes { buffer in
            do throws(PublishLogDecodingError) {
                return .success(try PublishLogRecord.decode(buffer))
            } catch {
                return .failure(error)
            }
        }
    }

    /// The error decoding `bytes` throws; nil when it returns a record.
    static func error(decoding bytes: [UInt8]) -> PublishLogDecodingError? {
        if case .failure(let error) = decode(bytes) { return error }
        return nil
    }

    static func isMalformed(_ error: PublishLogDecodingError?) -> Bool {
        if case .malformed? = error { return true }
        return false
    }

    static func entry(
        topic: String = "inbox/a", seq: Int64 = 1, serverTime: Int64 = 1_700_000_000_000, payload: Data = Data([1, 2]),
        shouldPush: Bool = false, expiresAt: Int64 = 0, idempotencyKey: Data? = nil, control: Bool = false,
        retiresKey: Data? = nil, registersKey: Data? = nil, rotatesTo: Data? = nil, bytesAfter: Int64 = 2,
        lastControlSeqAfter: Int64 = 0
    ) -> AppendedEntry {
        AppendedEntry(
            topic: topic, seq: seq, serverTime: serverTime, payload: payload, shouldPush: shouldPush,
            expiresAt: expiresAt, idempotencyKey: idempotencyKey, control: control, retiresKey: retiresKey,
            registersKey: registersKey, rotatesTo: rotatesTo, bytesAfter: bytesAfter,
            lastControlSeqAfter: lastControlSeqAfter)
    }

    /// A small record with two entries, for the byte-by-byte tests.
    static let small = PublishLogRecord(
        number: 42,
        entries: [
            entry(topic: "inbox/x", seq: 5, payload: Data([9, 8, 7]), shouldPush: true, idempotencyKey: Data([1])),
            entry(topic: "group/y", seq: 6, payload: Data(), control: true, lastControlSeqAfter: 6),
        ])

    // MARK: CRC-32C

    @Test("CRC-32C gives the published check values")
    func crcKnownVectors() {
        #expect(CRC32C.checksum(Array("123456789".utf8)) == 0xE306_9283)
        #expect(CRC32C.checksum([UInt8]()) == 0)
        #expect(CRC32C.checksum([UInt8](repeating: 0, count: 32)) == 0x8A91_36AA)
        // The other RFC 3720 (iSCSI) vectors.
        #expect(CRC32C.checksum([UInt8](repeating: 0xFF, count: 32)) == 0x62A8_AB43)
        #expect(CRC32C.checksum((0..<32).map { UInt8($0) }) == 0x46DD_794E)
        #expect(CRC32C.checksum((0..<32).reversed().map { UInt8($0) }) == 0x113F_DB5C)
        // The raw-buffer entry point agrees with the sequence one.
        let digits = Array("123456789".utf8)
        #expect(digits.withUnsafeBytes { CRC32C.checksum($0) } == 0xE306_9283)
        #expect(Self.referenceCRC(digits) == 0xE306_9283)
    }

    @Test("continuing a checksum over a split gives the checksum of the whole, wherever the split is")
    func crcContinues() {
        var random = SplitMix64(state: 0xC0FFEE)
        let bytes = random.bytes(103)
        let whole = CRC32C.checksum(bytes)
        #expect(whole == Self.referenceCRC(bytes))
        bytes.withUnsafeBytes { buffer in
            for split in 0...bytes.count {
                let first = CRC32C.checksum(UnsafeRawBufferPointer(rebasing: buffer[..<split]))
                let both = CRC32C.checksum(UnsafeRawBufferPointer(rebasing: buffer[split...]), continuing: first)
                #expect(both == whole, "split at \(split)")
            }
        }
        // Three pieces chain the same way.
        let chained = [0..<10, 10..<57, 57..<103].reduce(UInt32(0)) { crc, range in
            bytes.withUnsafeBytes { CRC32C.checksum(UnsafeRawBufferPointer(rebasing: $0[range]), continuing: crc) }
        }
        #expect(chained == whole)
    }

    @Test("slicing by eight matches the bit-at-a-time definition at every length and alignment")
    func crcMatchesReference() {
        var random = SplitMix64(state: 17)
        let bytes = random.bytes(10_000 + 8)
        bytes.withUnsafeBytes { buffer in
            for start in 0..<8 {
                for length in 0..<64 {
                    let slice = UnsafeRawBufferPointer(rebasing: buffer[start..<(start + length)])
                    #expect(
                        CRC32C.checksum(slice) == Self.referenceCRC(bytes[start..<(start + length)]),
                        "start \(start), length \(length)")
                    #expect(
                        CRC32C.checksum(slice, continuing: 0x1234_5678)
                            == Self.referenceCRC(bytes[start..<(start + length)], continuing: 0x1234_5678),
                        "start \(start), length \(length), continuing")
                }
            }
            for start in [0, 3] {
                let large = UnsafeRawBufferPointer(rebasing: buffer[start..<(start + 10_000)])
                #expect(CRC32C.checksum(large) == Self.referenceCRC(bytes[start..<(start + 10_000)]), "start \(start)")
            }
        }
    }

    // MARK: Round trip

    @Test("a record with every optional field present and absent decodes to the same record and size")
    func roundTrip() throws {
        let record = PublishLogRecord(
            number: 0x0102_0304_0506_0708,
            entries: [
                Self.entry(payload: Data()),
                Self.entry(
                    topic: "room/café-日本-🎉", seq: Int64.max, serverTime: Int64.min,
                    payload: Data((0..<WireLimits.maxPayloadBytes).map { UInt8(truncatingIfNeeded: $0 &* 31) }),
                    shouldPush: true, expiresAt: Int64.max, idempotencyKey: Data([1, 2, 3]), control: true,
                    retiresKey: Data(repeating: 0xAA, count: 32), registersKey: Data(repeating: 0xBB, count: 32),
                    rotatesTo: Data(repeating: 0xCC, count: 32), bytesAfter: Int64.max, lastControlSeqAfter: Int64.max),
                Self.entry(
                    seq: 2, shouldPush: true, idempotencyKey: Data([7]), registersKey: Data([8, 9]),
                    lastControlSeqAfter: 1),
                // Present but empty keys are not absent ones.
                Self.entry(
                    topic: String(repeating: "t", count: WireLimits.maxTopicLength), seq: 3, idempotencyKey: Data(),
                    retiresKey: Data(), rotatesTo: Data(repeating: 1, count: PublishLogLimits.maxKeyBytes)),
                Self.entry(seq: 4, control: true, registersKey: Data([5]), lastControlSeqAfter: 4),
            ])
        let bytes = try record.encoded()
        let decoded = try #require(try? Self.decode(bytes).get())
        #expect(decoded.record == record)
        #expect(decoded.size == bytes.count)
        #expect(decoded.record.entries[3].idempotencyKey == Data())
        #expect(decoded.record.entries[0].idempotencyKey == nil)
        // The header announces the body that follows it.
        let announced = bytes[4..<8].reversed().reduce(0) { $0 << 8 | Int($1) }
        #expect(announced == bytes.count - PublishLogLimits.headerBytes)
    }

    @Test("a record with no entries round-trips, at the smallest and largest numbers")
    func roundTripEmpty() throws {
        for number in [0, 1, UInt64.max] {
            let record = PublishLogRecord(number: number, entries: [])
            let bytes = try record.encoded()
            #expect(bytes.count == PublishLogLimits.headerBytes + 4)
            let decoded = try #require(try? Self.decode(bytes).get())
            #expect(decoded.record == record)
            #expect(decoded.size == bytes.count)
        }
    }

    @Test("two records back to back: the first decodes with its own size and the second from there")
    func backToBack() throws {
        let first = try Self.small.encoded()
        let secondRecord = PublishLogRecord(
            number: 43,
            entries: [
                Self.entry(
                    seq: 7, payload: Data(repeating: 4, count: 1000), retiresKey: Data([1]), rotatesTo: Data([2]))
            ])
        let second = try secondRecord.encoded()
        let bytes = first + second
        let one = try #require(try? Self.decode(bytes).get())
        #expect(one.record == Self.small)
        #expect(one.size == first.count)
        let two = try #require(try? Self.decode(Array(bytes[one.size...])).get())
        #expect(two.record == secondRecord)
        #expect(two.size == second.count)
    }

    @Test("the hand-built framing used below writes the same bytes as the encoder")
    func framingMatchesEncoder() throws {
        let record = PublishLogRecord(
            number: 9,
            entries: [
                Self.entry(
                    topic: "inbox/a", seq: 1, serverTime: 1_700_000_000_000, payload: Data([1, 2, 3]),
                    shouldPush: true, expiresAt: 0, idempotencyKey: Data([0x11]), control: false,
                    rotatesTo: Data([0x22, 0x33]), bytesAfter: 3, lastControlSeqAfter: 0)
            ])
        let flags: UInt8 = 1 << 0 | 1 << 2 | 1 << 5
        let hand = Self.frame(
            Self.body([Self.entryBytes(flags: flags, keys: [[0x11], [0x22, 0x33]])]), number: 9)
        let encoded = try record.encoded()
        #expect(hand.count == encoded.count)
        #expect(hand.prefix(16) == encoded.prefix(16), "magic, length and number")
        #expect(hand.dropFirst(20) == encoded.dropFirst(20), "body")
        #expect(hand[16..<20] == encoded[16..<20], "checksum over bytes 4..<16 and the body")
        #expect((try? Self.decode(hand).get())?.record == record)
    }

    // MARK: Torn, foreign and damaged bytes

    @Test("every strict prefix of a record is truncated, and says how much it needs")
    func truncatedPrefixes() throws {
        let bytes = try Self.small.encoded()
        for length in 0..<bytes.count {
            let needed = length < PublishLogLimits.headerBytes ? PublishLogLimits.headerBytes : bytes.count
            #expect(
                Self.error(decoding: Array(bytes.prefix(length))) == .truncated(needed: needed, available: length),
                "prefix of \(length)")
        }
    }

    @Test("zeros and a wrong magic are not a record")
    func notARecord() throws {
        #expect(Self.error(decoding: [UInt8](repeating: 0, count: 20)) == .notARecord)
        #expect(Self.error(decoding: [UInt8](repeating: 0, count: 4096)) == .notARecord)
        let bytes = try Self.small.encoded()
        for index in 0..<4 {
            var wrong = bytes
            wrong[index] ^= 0x20
            #expect(Self.error(decoding: wrong) == .notARecord, "magic byte \(index)")
        }
        // The magic read big-endian is not the magic.
        var swapped = bytes
        swapped.replaceSubrange(0..<4, with: bytes[0..<4].reversed())
        #expect(Self.error(decoding: swapped) == .notARecord)
    }

    @Test("a header announcing a body over the limit is oversized, from the header alone")
    func oversized() {
        let limit = PublishLogLimits.maxBodyBytes
        for length in [UInt32(limit + 1), UInt32(limit * 2), UInt32.max] {
            let header = Array(Self.frame([], length: length).prefix(PublishLogLimits.headerBytes))
            #expect(header.count == PublishLogLimits.headerBytes)
            #expect(Self.error(decoding: header) == .oversized(bodyBytes: Int(length)), "length \(length)")
        }
        // At the limit it is only truncated.
        let header = Self.frame([], length: UInt32(limit))
        #expect(
            Self.error(decoding: header)
                == .truncated(needed: PublishLogLimits.headerBytes + limit, available: PublishLogLimits.headerBytes))
    }

    @Test("flipping any byte of a record's header or body makes it fail to decode")
    func corruptBytes() throws {
        let bytes = try Self.small.encoded()
        let header = PublishLogLimits.headerBytes
        // Undamaged, it decodes: the failures below are the damage's.
        #expect(Self.error(decoding: bytes) == nil)
        for index in 0..<bytes.count {
            for mask: UInt8 in [0x01, 0x80, 0xFF] {
                var damaged = bytes
                damaged[index] ^= mask
                let error = Self.error(decoding: damaged)
                let expected: PublishLogDecodingError
                switch index {
                case 0..<4:
                    expected = .notARecord
                case 4..<8:
                    let length = damaged[4..<8].reversed().reduce(0) { $0 << 8 | Int($1) }
                    if length > PublishLogLimits.maxBodyBytes {
                        expected = .oversized(bodyBytes: length)
                    } else if header + length > bytes.count {
                        expected = .truncated(needed: header + length, available: bytes.count)
                    } else {
                        expected = .checksumMismatch
                    }
                default:
                    expected = .checksumMismatch
                }
                #expect(error == expected, "byte \(index) ^ \(mask)")
            }
        }
    }

    // MARK: Hostile bodies with a correct checksum

    /// A body that passes the checksum but breaks one of the format's rules.
    struct HostileBody: Sendable, CustomTestStringConvertible {
        let testDescription: String
        let body: [UInt8]

        init(_ name: String, _ body: [UInt8]) {
            self.testDescription = name
            self.body = body
        }

        static let all: [HostileBody] = {
            typealias T = PublishLogRecordTests
            let one = T.entryBytes()
            let keyFlags: [UInt8] = [1 << 2, 1 << 3, 1 << 4, 1 << 5]
            let overKey = [UInt8](repeating: 7, count: PublishLogLimits.maxKeyBytes + 1)
            var cases: [HostileBody] = [
                HostileBody("an entry count far beyond the body", T.body(count: 1_000_000, [one])),
                HostileBody("the largest entry count", T.body(count: UInt32.max, [one])),
                HostileBody("an empty body", []),
                HostileBody("a body shorter than its entry count", [0, 0]),
                HostileBody(
                    "one more entry than the body holds",
                    T.body(count: 2, [T.entryBytes(payload: [UInt8](repeating: 5, count: 200))])),
                HostileBody(
                    "a count of one and no entry", T.body(count: 1, [], trailing: [UInt8](repeating: 0, count: 60))),
                HostileBody("a payload length past the end", T.body([Array(one.dropLast(2))])),
                HostileBody(
                    "a key length past the end",
                    T.body([Array(T.entryBytes(flags: 1 << 2, keys: [[1, 2, 3, 4]]).dropLast(1))])),
                HostileBody("a key flag with no key", T.body([T.entryBytes(flags: 1 << 3)])),
                HostileBody(
                    "a topic length of 4 GiB",
                    T.body([Array(one.prefix(41)) + [0xFF, 0xFF, 0xFF, 0xFF] + Array(one.dropFirst(45))])),
                HostileBody(
                    "a topic one byte over the limit",
                    T.body([T.entryBytes(topic: [UInt8](repeating: 0x61, count: WireLimits.maxTopicLength + 1))])),
                HostileBody(
                    "a payload one byte over the limit",
                    T.body([T.entryBytes(payload: [UInt8](repeating: 0, count: WireLimits.maxPayloadBytes + 1))])),
                HostileBody("a topic that is not UTF-8", T.body([T.entryBytes(topic: [0x61, 0xFF, 0xFE])])),
                HostileBody("a topic cut mid-character", T.body([T.entryBytes(topic: [0x61, 0xC3])])),
                HostileBody("a topic with an overlong encoding", T.body([T.entryBytes(topic: [0xC0, 0xAF])])),
                HostileBody("a topic that is a lone surrogate", T.body([T.entryBytes(topic: [0xED, 0xA0, 0x80])])),
                HostileBody("an empty topic", T.body([T.entryBytes(topic: [])])),
                HostileBody("seq 0", T.body([T.entryBytes(seq: 0)])),
                HostileBody("a negative seq", T.body([T.entryBytes(seq: -1, lastControlSeqAfter: -1)])),
                HostileBody("a last control seq after the seq", T.body([T.entryBytes(seq: 5, lastControlSeqAfter: 6)])),
                HostileBody("a negative last control seq", T.body([T.entryBytes(lastControlSeqAfter: -1)])),
                HostileBody("negative stored bytes", T.body([T.entryBytes(bytesAfter: -1)])),
                HostileBody("a byte after the last entry", T.body([one], trailing: [0])),
                HostileBody(
                    "a whole entry's worth after the last entry", T.body(count: 1, [one, T.entryBytes(seq: 2)])),
                HostileBody("an entry cut in its fixed part", T.body([Array(one.prefix(20))])),
                HostileBody("a count and a lone flags byte", T.body(count: 1, [], trailing: [0])),
            ]
            for bit in 6..<8 {
                cases.append(HostileBody("unknown flag bit \(bit)", T.body([T.entryBytes(flags: 1 << bit)])))
            }
            for (index, flag) in keyFlags.enumerated() {
                cases.append(
                    HostileBody(
                        "key \(index) one byte over the limit", T.body([T.entryBytes(flags: flag, keys: [overKey])])))
            }
            return cases
        }()
    }

    @Test("a checksummed body that breaks the format is malformed", arguments: HostileBody.all)
    func hostileBody(_ hostile: HostileBody) {
        let error = Self.error(decoding: Self.frame(hostile.body))
        #expect(Self.isMalformed(error), "got \(String(describing: error))")
    }

    @Test("the same bodies at their limits decode, so the hostile cases fail for their own reason")
    func hostileBoundaries() throws {
        let valid: [(String, [UInt8])] = [
            ("one entry", Self.body([Self.entryBytes()])),
            (
                "a topic at the limit",
                Self.body([Self.entryBytes(topic: [UInt8](repeating: 0x61, count: WireLimits.maxTopicLength))])
            ),
            (
                "a payload at the limit",
                Self.body([Self.entryBytes(payload: [UInt8](repeating: 0, count: WireLimits.maxPayloadBytes))])
            ),
            ("a multi-byte topic", Self.body([Self.entryBytes(topic: Array("ü/日".utf8))])),
            ("seq 1", Self.body([Self.entryBytes(seq: 1)])),
            ("a last control seq equal to the seq", Self.body([Self.entryBytes(seq: 5, lastControlSeqAfter: 5)])),
            ("every flag and key", Self.body([Self.entryBytes(flags: 0x3F, keys: [[1], [2], [3], [4]])])),
            ("no entries", Self.body([])),
        ]
        for (name, body) in valid {
            let result = Self.decode(Self.frame(body))
            #expect((try? result.get())?.size == PublishLogLimits.headerBytes + body.count, "\(name): \(result)")
        }
        for flag: UInt8 in [1 << 2, 1 << 3, 1 << 4, 1 << 5] {
            let key = [UInt8](repeating: 7, count: PublishLogLimits.maxKeyBytes)
            let body = Self.body([Self.entryBytes(flags: flag, keys: [key])])
            #expect((try? Self.decode(Self.frame(body)).get()) != nil, "flag \(flag) at the key limit")
        }
    }

    // MARK: Random bytes

    @Test("random bytes never crash the decoder, framed or not")
    func randomGarbage() throws {
        var random = SplitMix64(state: 0x5EED)
        let valid = try Self.small.encoded()
        let validBody = Array(valid[PublishLogLimits.headerBytes...])
        var decoded = 0
        for round in 0..<4000 {
            let length = random.below(301)
            let bytes: [UInt8]
            switch round % 4 {
            case 0:
                // Anything at all.
                bytes = random.bytes(length)
            case 1:
                // The magic, then anything.
                bytes = Self.frame([]).prefix(4) + random.bytes(length)
            case 2:
                // A correctly framed body of random bytes.
                bytes = Self.frame(random.bytes(length))
            default:
                // A valid body with a few bytes changed, framed again.
                var body = validBody
                for _ in 0..<(1 + random.below(4)) {
                    body[random.below(body.count)] = UInt8(truncatingIfNeeded: random.next())
                }
                bytes = Self.frame(body)
            }
            switch Self.decode(bytes) {
            case .success(let result):
                decoded += 1
                #expect(result.size <= bytes.count, "round \(round)")
                #expect(round % 4 >= 2, "round \(round): unframed random bytes decoded")
            case .failure(let error):
                if round % 4 >= 2 {
                    // The framing is right, so only the body can be wrong.
                    #expect(Self.isMalformed(error), "round \(round): \(error)")
                }
            }
        }
        // Some changed bodies still decode (a changed payload byte, say).
        #expect(decoded > 0)
    }

    // MARK: Runs of records in a file

    @Test("a file's run is its consecutive whole records from the start")
    func runs() throws {
        let records = (7...9).map { number in
            PublishLogRecord(
                number: number,
                entries: [Self.entry(seq: Int64(number), payload: Data(repeating: UInt8(number), count: Int(number)))])
        }
        let encoded = try records.map { try $0.encoded() }
        let three = encoded.flatMap { $0 }
        let zeros = [UInt8](repeating: 0, count: 256)

        #expect(PublishLogFiles.run(in: three + zeros) == records)
        #expect(PublishLogFiles.run(in: three) == records)
        #expect(PublishLogFiles.run(in: zeros).isEmpty)
        #expect(PublishLogFiles.run(in: []).isEmpty)

        // What an older run left after this one: valid, but not next.
        let stale = try PublishLogRecord(number: 3, entries: [Self.entry()]).encoded()
        #expect(PublishLogFiles.run(in: three + stale + zeros) == records)
        // The same number again is not next either.
        #expect(PublishLogFiles.run(in: three + encoded[2]) == records)

        // The last write cut short.
        let cut = Array(three.dropLast())
        #expect(PublishLogFiles.run(in: cut) == Array(records.prefix(2)))
        #expect(PublishLogFiles.run(in: cut + zeros) == Array(records.prefix(2)))

        // A damaged byte in the second record ends the run before it.
        var damaged = three
        damaged[encoded[0].count + PublishLogLimits.headerBytes + 10] ^= 0x04
        #expect(PublishLogFiles.run(in: damaged + zeros) == Array(records.prefix(1)))
    }
}
