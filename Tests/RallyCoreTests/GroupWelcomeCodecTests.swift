import Foundation
import RallyCore
import RallyCrypto
import RallyWire
import Testing

@Suite("GroupWelcomeCodec")
struct GroupWelcomeCodecTests {
    /// A snapshot with members, a name and a welcome message.
    static func snapshot(members: Int) -> WireGroupSnapshot {
        var snapshot = WireGroupSnapshot()
        snapshot.groupID = "g1"
        snapshot.profile.name = "Climbing club"
        snapshot.welcomeMessage = "Bring shoes"
        snapshot.members = (0..<members).map { index in
            var member = WireGroupMemberRecord()
            member.identity = Identity(displayName: "member \(index)").publicIdentity.wireBundle
            member.role = GroupRole.member.wire
            return member
        }
        return snapshot
    }

    @Test func theSummaryReadsTheNameAndWelcomeMessageOutOfTheSnapshotBytes() throws {
        var welcome = WireGroupWelcome()
        welcome.groupID = "g1"
        welcome.snapshot = FrameCodec.encode(Self.snapshot(members: 3))
        let codec = GroupWelcomeCodec()
        let decoded = try codec.decode(codec.encode(welcome))
        #expect(
            codec.summary(of: decoded)
                == "added you to the group \"Climbing club\" (g1)\nWelcome message: Bring shoes")
        #expect(
            codec.fallback(for: decoded) == "You were added to the group \"Climbing club\"; update Rally to open it.")
    }

    @Test(
        "A welcome with malformed snapshot bytes still has a summary, with no name",
        arguments: [
            Data([0x1A, 0x05, 0x0A]),  // the profile field, cut short
            Data([0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01]),  // a tag past 64 bits
            Data(repeating: 0x0A, count: 40),  // nested lengths running past the end
        ])
    func malformedSnapshot(_ bytes: Data) throws {
        var welcome = WireGroupWelcome()
        welcome.groupID = "g1"
        welcome.snapshot = bytes
        let codec = GroupWelcomeCodec()
        let decoded = try codec.decode(codec.encode(welcome))
        #expect(codec.summary(of: decoded) == "added you to the group \"\" (g1)")
    }

    /// The snapshot field changed from the nested message to its bytes
    /// under the same number: both encode as field 4, length-delimited, so
    /// welcomes read the same either way.
    @Test func theSnapshotBytesAreOnTheWireWhatTheNestedMessageWas() throws {
        let snapshot = FrameCodec.encode(Self.snapshot(members: 2))
        var welcome = WireGroupWelcome()
        welcome.snapshot = snapshot
        var length = Data()
        var rest = snapshot.count
        while rest >= 0x80 {
            length.append(UInt8(rest & 0x7F) | 0x80)
            rest >>= 7
        }
        length.append(UInt8(rest))
        #expect(FrameCodec.encode(welcome) == Data([4 << 3 | 2]) + length + snapshot)
    }
}
