import Foundation
import RallyCrypto
import RallyTestSupport
import RallyWire
import Testing

@testable import RallyCore

/// The content the group lifecycle added, as a client receives it from
/// anyone: round trips, every truncation, oversized, garbage and hostile
/// bodies each end in the value or a typed `ContentError`, never a crash.
@Suite("Group lifecycle content codecs on hostile input")
struct GroupContentCodecTests {
    /// One codec under test, type-erased: an example body, its limit, and
    /// a decode that reports only whether and how it failed.
    struct Case: Sendable, CustomTestStringConvertible {
        let name: String
        let limit: Int
        let example: @Sendable () throws -> WireEncodedContent
        let decodes: @Sendable (WireEncodedContent) throws(ContentError) -> Bool
        var testDescription: String { name }
    }

    static func invite() -> WireSignedInvite {
        let issuer = Identity(displayName: "olive")
        var payload = WireInvitePayload()
        payload.inviteTag = Data(repeating: 1, count: 16)
        payload.issuer = issuer.publicIdentity.wireBundle
        payload.joinInboxID = Identity(displayName: "invites").inboxID.rawValue
        payload.invitee = Identity(displayName: "dan").inboxID.rawValue
        payload.name = "Hikers"
        return Invite.sign(payload, by: issuer)
    }

    static let cases: [Case] = [
        Case(
            name: "invite_join_pending", limit: JoinPendingNoticeCodec.maxBodyBytes,
            example: {
                var notice = WireJoinPendingNotice()
                notice.inviteTag = "00"
                notice.groupID = "g"
                notice.approvers = [Identity(displayName: "max").inboxID.rawValue]
                return try JoinPendingNoticeCodec().encode(notice)
            },
            decodes: { content throws(ContentError) in (try JoinPendingNoticeCodec().decode(content)).groupID == "g" }
        ),
        Case(
            name: "group_support", limit: GroupSupportCodec.maxBodyBytes,
            example: {
                var message = WireGroupSupportMessage()
                message.groupID = "g"
                message.text = "may I join?"
                return try GroupSupportCodec().encode(message)
            }, decodes: { content throws(ContentError) in (try GroupSupportCodec().decode(content)).groupID == "g" }),
        Case(
            name: "group_invitation", limit: GroupInvitationCodec.maxBodyBytes,
            example: {
                var invitation = WireGroupInvitation()
                invitation.invite = invite()
                return try GroupInvitationCodec().encode(invitation)
            },
            decodes: { content throws(ContentError) in
                (try GroupInvitationCodec().decode(content)).invite.signature.count == 64
            }),
        Case(
            name: "reaction", limit: ReactionCodec.maxBodyBytes,
            example: { try ReactionCodec().encode(Reaction(messageID: "ab", emoji: "👍")) },
            decodes: { content throws(ContentError) in (try ReactionCodec().decode(content)).messageID == "ab" }),
        Case(
            name: "delete_message", limit: MessageDeletionCodec.maxBodyBytes,
            example: { try MessageDeletionCodec().encode(MessageDeletion(messageID: "ab")) },
            decodes: { content throws(ContentError) in (try MessageDeletionCodec().decode(content)).messageID == "ab" }
        ),
        Case(
            name: "group_direct", limit: GroupDirectCodec.maxBodyBytes,
            example: { try GroupDirectCodec().encode(GroupDirectMessage(groupID: "g", text: "psst")) },
            decodes: { content throws(ContentError) in (try GroupDirectCodec().decode(content)).groupID == "g" }),
    ]

    @Test("a round trip through the registry gives the value back", arguments: cases)
    func roundTrip(_ c: Case) throws {
        let content = try c.example()
        #expect(try c.decodes(content))
        #expect(CodecRegistry.standard.decode(content).isKnown)
    }

    @Test("every truncation is the value, another value or a typed error", arguments: cases)
    func truncations(_ c: Case) throws {
        let full = try c.example()
        for length in 0..<full.content.count {
            var cut = full
            cut.content = full.content.prefix(length)
            do {
                _ = try c.decodes(cut)
            } catch {
                // Typed: ContentError is all decode may throw.
                _ = error.description
            }
        }
    }

    @Test("one byte over the limit is refused before parsing", arguments: cases)
    func oversized(_ c: Case) throws {
        var content = try c.example()
        content.content = Data(repeating: 0x7B, count: c.limit + 1)
        #expect(throws: ContentError.tooLarge(size: c.limit + 1, limit: c.limit)) { try c.decodes(content) }
    }

    @Test("random bytes never crash the decoder", arguments: cases)
    func garbage(_ c: Case) throws {
        var rng = SeededGenerator(seed: UInt64(c.name.utf8.reduce(0) { $0 &* 31 &+ UInt64($1) }))
        var content = try c.example()
        for _ in 0..<200 {
            content.content = rng.bytes(Int.random(in: 0..<min(c.limit, 512), using: &rng))
            _ = try? c.decodes(content)
        }
    }

    @Test("hostile bodies within the limit are refused by the limits on what they hold")
    func hostile() throws {
        var notice = WireJoinPendingNotice()
        notice.approvers = Array(repeating: "x", count: JoinPendingNoticeCodec.maxApprovers + 1)
        var content = WireEncodedContent()
        content.type = JoinPendingNoticeCodec.contentType.wire
        content.content = FrameCodec.encode(notice)
        #expect(throws: ContentError.self) { try JoinPendingNoticeCodec().decode(content) }
        #expect(throws: ContentError.tooLarge(size: JoinPendingNoticeCodec.maxApprovers + 1, limit: 256)) {
            try JoinPendingNoticeCodec().encode(notice)
        }
        var support = WireGroupSupportMessage()
        support.text = String(repeating: "a", count: GroupSupportCodec.maxTextBytes + 1)
        #expect(throws: ContentError.tooLarge(size: GroupSupportCodec.maxTextBytes + 1, limit: 4096)) {
            try GroupSupportCodec().encode(support)
        }
        var json = WireEncodedContent()
        json.type = ReactionCodec.contentType.wire
        json.content = Data(#"{"messageID": 7}"#.utf8)
        #expect(
            throws: ContentError.malformed(contentType: "rally.dev/reaction:1.0", reason: "not the expected JSON")
        ) { try ReactionCodec().decode(json) }
    }
}
