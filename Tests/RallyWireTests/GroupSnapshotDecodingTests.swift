import Foundation
import Testing

@testable import RallyWire

/// The snapshot whose growing fields are read by hand is SwiftProtobuf's
/// decoding whenever the hand path takes it, takes every snapshot an
/// encoder writes, and leaves the rest (malformed, hostile, or merely
/// unusual) to SwiftProtobuf.
@Suite("Group snapshots read by hand")
struct GroupSnapshotDecodingTests {
    private static let edgeInt64: [Int64] = [0, 1, -1, 127, 128, .max, .min, 1_780_000_000_000]

    /// SwiftProtobuf's decoding, with the codec's options and no hand path.
    private static func reference(_ bytes: Data, limit: Int = .max) throws -> WireGroupSnapshot {
        try FrameCodec.decode(WireGroupSnapshot.self, from: bytes, limit: limit)
    }

    private static func bundle(_ random: inout SeededGenerator, index: Int) -> WireKeyBundle {
        var bundle = WireKeyBundle()
        func maybe() -> Bool { Bool.random(using: &random) }
        if maybe() { bundle.signingPublicKey = random.bytes([32, 0, 31, 33].randomElement(using: &random)!) }
        if maybe() { bundle.agreementPublicKey = random.bytes([32, 0, 1].randomElement(using: &random)!) }
        if maybe() {
            bundle.displayName = ["Ada", "", "joiner \(index)", "Zoë 🧗‍♀️ a name past fifteen bytes"].randomElement(
                using: &random)!
        }
        if maybe() { bundle.createdAtMs = edgeInt64[index % edgeInt64.count] }
        return bundle
    }

    /// Snapshots with the hand-read fields (members, applied commit ids,
    /// admitted requests) and others present or not, at their edges and at
    /// random.
    private static func randomSnapshots(count: Int, seed: UInt64, maxMembers: Int = 12) -> [WireGroupSnapshot] {
        var random = SeededGenerator(seed: seed)
        return (0..<count).map { index in
            var snapshot = WireGroupSnapshot()
            func maybe() -> Bool { Bool.random(using: &random) }
            if maybe() { snapshot.groupID = String(format: "%032x", index) }
            if maybe() { snapshot.epoch = UInt64(index) << (index % 40) }
            if maybe() { snapshot.profile.name = "Climbers \(index)" }
            snapshot.members = (0..<Int.random(in: 0...maxMembers, using: &random)).map { member in
                var record = WireGroupMemberRecord()
                if Int.random(in: 0..<8, using: &random) > 0 { record.identity = bundle(&random, index: member) }
                if maybe() { record.role = WireGroupRole(rawValue: Int.random(in: 0...5, using: &random))! }
                if maybe() {
                    record.addedBy = String(repeating: "a", count: [32, 1, 0].randomElement(using: &random)!)
                }
                return record
            }
            if maybe() { snapshot.lastCommitID = random.bytes(32) }
            snapshot.appliedCommitIds = (0..<Int.random(in: 0...4, using: &random)).map { _ in
                random.bytes([32, 0, 5].randomElement(using: &random)!)
            }
            if maybe() { snapshot.inviteIdentity = bundle(&random, index: index) }
            snapshot.admittedJoinRequests = (0..<Int.random(in: 0...6, using: &random)).map { _ in
                random.bytes([32, 16, 0].randomElement(using: &random)!)
            }
            if maybe() { snapshot.banned = ["b\(index)", "c"] }
            if maybe() { snapshot.transcript = random.bytes(32) }
            if maybe() { snapshot.retiredInviteIdentities = [bundle(&random, index: index)] }
            if maybe() {
                var pending = WirePendingMemberRecord()
                pending.identity = bundle(&random, index: index)
                pending.role = .member
                pending.joinRequestID = random.bytes(32)
                snapshot.pending = [pending]
            }
            if maybe() { snapshot.welcomeMessage = "Welcome, ünïcode 🚀" }
            if maybe() { snapshot.deleted = true }
            return snapshot
        }
    }

    @Test(
        "every snapshot an encoder writes, with each field present or not and at its edges, is read by hand to SwiftProtobuf's value"
    )
    func encodedSnapshots() throws {
        for snapshot in Self.randomSnapshots(count: 400, seed: 0x5A9) {
            let bytes = FrameCodec.encode(snapshot)
            guard !bytes.isEmpty else { continue }
            let hand = try #require(GroupSnapshotDecoding.decode(bytes), "\(snapshot)")
            #expect(hand == snapshot)
            #expect(hand == (try Self.reference(bytes)))
            #expect(try FrameCodec.decodeGroupSnapshot(bytes, limit: .max) == snapshot)
        }
    }

    @Test("a large group's snapshot, and one that is a slice of a larger buffer, are read by hand")
    func largeAndSliced() throws {
        var snapshot = Self.randomSnapshots(count: 1, seed: 7, maxMembers: 0)[0]
        var random = SeededGenerator(seed: 8)
        snapshot.members = (0..<600).map { index in
            var record = WireGroupMemberRecord()
            record.identity = Self.bundle(&random, index: index)
            record.role = .member
            record.addedBy = String(repeating: "q", count: 32)
            return record
        }
        snapshot.admittedJoinRequests = (0..<600).map { _ in random.bytes(32) }
        let bytes = FrameCodec.encode(snapshot)
        #expect(GroupSnapshotDecoding.decode(bytes) == snapshot)
        let framed = Data([0xFF, 0xFE]) + bytes + Data([0x01])
        #expect(GroupSnapshotDecoding.decode(framed[2..<(framed.count - 1)]) == snapshot)
    }

    @Test(
        "every cut, flipped bit and inserted byte: what the hand path takes is SwiftProtobuf's value, the rest is decoded or refused by it with a typed error"
    )
    func mutations() throws {
        var random = SeededGenerator(seed: 0x77E)
        var audit = HandPathAudit<WireGroupSnapshot>()
        for snapshot in Self.randomSnapshots(count: 50, seed: 0xBEEF, maxMembers: 3) {
            let bytes = FrameCodec.encode(snapshot)
            guard !bytes.isEmpty, bytes.count < 1_500 else { continue }
            let variants = random.mutations(of: bytes, count: 120)
            for variant in variants {
                // (An empty snapshot is refused before either reading.)
                audit.check(
                    variant, reference: try? Self.reference(variant),
                    hand: variant.isEmpty ? nil : GroupSnapshotDecoding.decode(variant)
                ) { try FrameCodec.decodeGroupSnapshot(variant, limit: .max) }
            }
        }
        #expect(audit.mismatches.isEmpty, "\(audit.mismatches.prefix(3))")
        // The mutations leave many snapshots well formed: the hand path must
        // have taken some, or this test checks nothing of it.
        #expect(audit.taken > 1_000)
    }

    /// A member record (field 4) around `fields`, after a group id.
    private static func snapshot(member fields: Data) -> Data {
        ProtoBytes.bytesField(1, Data("g".utf8)) + ProtoBytes.bytesField(4, fields)
    }

    private static let key = Data(repeating: 0x42, count: 32)

    @Test(
        "snapshots in shapes the hand path leaves alone decode as SwiftProtobuf decodes them",
        arguments: [
            (
                "an identity given twice (merged)",
                snapshot(
                    member: ProtoBytes.bytesField(1, ProtoBytes.bytesField(1, key))
                        + ProtoBytes.bytesField(1, ProtoBytes.bytesField(2, key)))
            ),
            (
                "member fields out of order",
                snapshot(member: ProtoBytes.varintField(2, 2) + ProtoBytes.bytesField(1, ProtoBytes.bytesField(1, key)))
            ),
            ("an unknown field in a member record", snapshot(member: ProtoBytes.varintField(9, 1))),
            (
                "an unknown field in a key bundle",
                snapshot(member: ProtoBytes.bytesField(1, ProtoBytes.varintField(7, 1)))
            ),
            ("a role the schema does not name", snapshot(member: ProtoBytes.varintField(2, 9))),
            ("a role past 32 bits", snapshot(member: ProtoBytes.varintField(2, 1 << 33 | 2))),
            (
                "a member tag padded to two bytes",
                ProtoBytes.bytesField(1, Data("g".utf8)) + Data([0xA2, 0x00]) + ProtoBytes.varint(2)
                    + ProtoBytes.varintField(2, 2)
            ),
            (
                "members between other fields",
                ProtoBytes.bytesField(4, ProtoBytes.varintField(2, 1)) + ProtoBytes.varintField(2, 9)
                    + ProtoBytes.bytesField(11, key) + ProtoBytes.bytesField(1, Data("g".utf8))
                    + ProtoBytes.bytesField(4, ProtoBytes.varintField(2, 5)) + ProtoBytes.bytesField(7, key)
            ),
            // SwiftProtobuf keeps a known field of another wire type as unknown.
            ("a member record as a varint", ProtoBytes.varintField(4, 1)),
            ("admitted requests as a varint", ProtoBytes.varintField(11, 1)),
            ("an unknown top-level field", snapshot(member: Data()) + ProtoBytes.varintField(90, 3)),
            (
                "an overlong but valid varint",
                snapshot(member: ProtoBytes.tag(field: 2, wireType: 0) + Data([0x82, 0x00]))
            ),
        ] as [(String, Data)])
    func unusualShapes(_ shape: (String, Data)) throws {
        let reference = try Self.reference(shape.1)
        if let hand = GroupSnapshotDecoding.decode(shape.1) { #expect(hand == reference, "\(shape.0)") }
        #expect(try FrameCodec.decodeGroupSnapshot(shape.1, limit: .max) == reference, "\(shape.0)")
    }

    @Test(
        "hostile snapshots are refused as malformed, never read by hand",
        arguments: [
            ("a member length past the end", ProtoBytes.tag(field: 4, wireType: 2) + ProtoBytes.varint(1 << 40)),
            (
                "a key length one past its record",
                snapshot(
                    member: ProtoBytes.bytesField(1, ProtoBytes.tag(field: 1, wireType: 2) + ProtoBytes.varint(33)))
            ),
            (
                "a display name that is not UTF-8",
                snapshot(member: ProtoBytes.bytesField(1, ProtoBytes.bytesField(3, Data([0x67, 0xC3, 0x28]))))
            ),
            ("an added-by that is not UTF-8", snapshot(member: ProtoBytes.bytesField(3, Data([0xFF])))),
            ("a cut-off role", snapshot(member: ProtoBytes.tag(field: 2, wireType: 0) + Data([0xFF]))),
            (
                "an eleven-byte varint",
                snapshot(member: ProtoBytes.tag(field: 2, wireType: 0) + Data(repeating: 0xFF, count: 10) + Data([1]))
            ),
            ("a cut-off top-level field", ProtoBytes.bytesField(1, Data("g".utf8)).dropLast()),
            ("a member field padded to six bytes", Data([0xA2, 0x80, 0x80, 0x80, 0x80, 0x00, 0x00])),
        ] as [(String, Data)])
    func hostile(_ shape: (String, Data)) {
        #expect(GroupSnapshotDecoding.decode(shape.1) == nil, "\(shape.0)")
        #expect(throws: FrameDecodingError.self, "\(shape.0)") {
            try FrameCodec.decodeGroupSnapshot(shape.1, limit: .max)
        }
    }

    @Test("an empty snapshot and one past the limit are refused before any reading")
    func edges() throws {
        #expect(throws: FrameDecodingError.empty) { try FrameCodec.decodeGroupSnapshot(Data(), limit: .max) }
        let bytes = FrameCodec.encode(Self.randomSnapshots(count: 1, seed: 21, maxMembers: 5)[0])
        #expect(throws: FrameDecodingError.tooLarge(size: bytes.count, limit: bytes.count - 1)) {
            try FrameCodec.decodeGroupSnapshot(bytes, limit: bytes.count - 1)
        }
        #expect(try FrameCodec.decodeGroupSnapshot(bytes, limit: bytes.count) == (try Self.reference(bytes)))
    }
}
