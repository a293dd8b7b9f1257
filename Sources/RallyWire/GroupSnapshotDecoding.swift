import Foundation

extension FrameCodec {
    /// A group snapshot, decoded to exactly the value of
    /// `decode(WireGroupSnapshot.self, from: bytes, limit: limit)`.
    ///
    /// The fields that grow with a group (its member records, applied
    /// commit ids and admitted join request ids) are most of a large
    /// group's snapshot, and SwiftProtobuf's generic decoding of them was
    /// most of the cost of reading one: a joiner reads the whole snapshot
    /// of the group it joins. Those fields are read by hand
    /// (``GroupSnapshotDecoding``); the rest, and anything unusual, is left
    /// to SwiftProtobuf.
    public static func decodeGroupSnapshot(
        _ bytes: Data, limit: Int
    ) throws(FrameDecodingError) -> WireGroupSnapshot {
        guard !bytes.isEmpty else { throw .empty }
        guard bytes.count <= limit else { throw .tooLarge(size: bytes.count, limit: limit) }
        if let snapshot = GroupSnapshotDecoding.decode(bytes) { return snapshot }
        return try parse(WireGroupSnapshot.self, bytes, limit: limit, keepingUnknownFields: true)
    }
}

/// A group snapshot's growing fields read by hand, in the shape every
/// encoder writes them: each member record with its fields once, in
/// field-number order, with their declared wire types, one-byte tags and no
/// unknown fields; each key bundle likewise. Every other top-level field is
/// copied, in order, into a smaller message that SwiftProtobuf decodes.
///
/// Anything else, including every malformed snapshot, is left to
/// SwiftProtobuf (`nil` here), which decodes it or says why not; so what
/// this accepts it decodes to exactly SwiftProtobuf's value.
/// `GroupSnapshotDecodingTests` holds it to that for random, mutated and
/// hostile snapshots.
enum GroupSnapshotDecoding {
    private typealias Reader = ProtobufWireReader

    /// `GroupSnapshot`'s repeated fields read here.
    private static let members = 4
    private static let appliedCommitIDs = 7
    private static let admittedJoinRequests = 11

    static func decode(_ bytes: Data) -> WireGroupSnapshot? {
        var members: [WireGroupMemberRecord] = []
        var appliedCommitIDs: [Data] = []
        var admittedJoinRequests: [Data] = []
        let rest: Data? = bytes.withUnsafeBytes { raw -> Data? in
            var reader = Reader(raw)
            var rest = Data()
            while !reader.isAtEnd {
                let fieldStart = reader.position
                guard let tag = reader.tag() else { return nil }
                let oneByteTag = reader.position == fieldStart + 1
                switch tag.field {
                case Self.members, Self.appliedCommitIDs, Self.admittedJoinRequests:
                    guard oneByteTag, tag.type == .lengthDelimited, let value = reader.lengthDelimited() else {
                        return nil
                    }
                    if tag.field == Self.members {
                        guard let member = memberRecord(raw, value) else { return nil }
                        members.append(member)
                    } else if tag.field == Self.appliedCommitIDs {
                        appliedCommitIDs.append(Reader.copy(raw, value))
                    } else {
                        admittedJoinRequests.append(Reader.copy(raw, value))
                    }
                default:
                    guard reader.skip(tag.type) else { return nil }
                    rest.append(contentsOf: UnsafeRawBufferPointer(rebasing: raw[fieldStart..<reader.position]))
                }
            }
            return rest
        }
        guard let rest,
            var snapshot = try? FrameCodec.parse(
                WireGroupSnapshot.self, rest, limit: .max, keepingUnknownFields: true)
        else { return nil }
        snapshot.members = members
        snapshot.appliedCommitIds = appliedCommitIDs
        snapshot.admittedJoinRequests = admittedJoinRequests
        return snapshot
    }

    /// `GroupMemberRecord`: identity (1), role (2), added by (3).
    private static func memberRecord(_ raw: UnsafeRawBufferPointer, _ range: Range<Int>) -> WireGroupMemberRecord? {
        var reader = Reader(raw, range)
        var last = 0
        var record = WireGroupMemberRecord()
        while !reader.isAtEnd {
            guard let field = reader.fieldInOrder(after: &last) else { return nil }
            switch field {
            case (1, .lengthDelimited):
                guard let value = reader.lengthDelimited(), let bundle = keyBundle(raw, value) else { return nil }
                record.identity = bundle
            case (2, .varint):
                // The roles the schema names; any other number is left to
                // SwiftProtobuf's reading of an open enum.
                guard let value = reader.varint(), let number = Int(exactly: value),
                    let role = WireGroupRole(rawValue: number), WireGroupRole.allCases.contains(role)
                else { return nil }
                record.role = role
            case (3, .lengthDelimited):
                guard let value = reader.lengthDelimited(),
                    let addedBy = Reader.utf8(raw, value)
                else { return nil }
                record.addedBy = addedBy
            default:
                return nil
            }
        }
        return record
    }

    /// `KeyBundle`: signing key (1), agreement key (2), display name (3),
    /// created at (4).
    private static func keyBundle(_ raw: UnsafeRawBufferPointer, _ range: Range<Int>) -> WireKeyBundle? {
        var reader = Reader(raw, range)
        var last = 0
        var bundle = WireKeyBundle()
        while !reader.isAtEnd {
            guard let field = reader.fieldInOrder(after: &last) else { return nil }
            switch field {
            case (1, .lengthDelimited):
                guard let value = reader.lengthDelimited() else { return nil }
                bundle.signingPublicKey = Reader.copy(raw, value)
            case (2, .lengthDelimited):
                guard let value = reader.lengthDelimited() else { return nil }
                bundle.agreementPublicKey = Reader.copy(raw, value)
            case (3, .lengthDelimited):
                guard let value = reader.lengthDelimited(),
                    let name = Reader.utf8(raw, value)
                else { return nil }
                bundle.displayName = name
            case (4, .varint):
                guard let value = reader.varint() else { return nil }
                bundle.createdAtMs = Int64(bitPattern: value)
            default:
                return nil
            }
        }
        return bundle
    }
}
