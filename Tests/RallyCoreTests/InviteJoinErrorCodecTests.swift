import Foundation
import RallyCore
import RallyWire
import Testing

@Suite("InviteJoinErrorCodec")
struct InviteJoinErrorCodecTests {
    static let codec = InviteJoinErrorCodec()
    static let tag = "3f9a0c1d2e4b5a697887766554433221"
    /// On a whole millisecond: the wire keeps milliseconds.
    static let sentAt = Fixtures.date(ms: 1_767_780_123_456)
    static let contentTypeText = "rally.dev/invite_join_error:1.0"

    static func content(json: String) -> WireEncodedContent {
        var content = WireEncodedContent()
        content.type = InviteJoinErrorCodec.contentType.wire
        content.content = Data(json.utf8)
        return content
    }

    static func jsonObject(_ content: WireEncodedContent) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: content.content) as? [String: Any])
    }

    // MARK: Round trip and shape

    @Test("round trip", arguments: JoinErrorType.allCases)
    func roundTrip(_ type: JoinErrorType) throws {
        for reason in [nil, "group exploded at 09:00", "élan 🚀 \"quoted\"\nnew line"] as [String?] {
            let error = InviteJoinError(errorType: type, inviteTag: Self.tag, timestamp: Self.sentAt, reason: reason)
            let content = try Self.codec.encode(error)
            #expect(ContentTypeID(wire: content.type) == InviteJoinErrorCodec.contentType)
            let decoded = try Self.codec.decode(content)
            #expect(decoded == error)
            #expect(decoded.errorType == type)
            #expect(decoded.rawErrorType == type.rawValue)
            #expect(decoded.reason == reason)
            // And through protobuf, as it travels.
            let wire = try FrameCodec.decode(WireEncodedContent.self, from: FrameCodec.encode(content), limit: 1 << 16)
            #expect(try Self.codec.decode(wire) == error)
        }
    }

    @Test func contentTypeIsRallyInviteJoinError() {
        #expect(InviteJoinErrorCodec.contentType.description == Self.contentTypeText)
        #expect(Self.codec.contentType == InviteJoinErrorCodec.contentType)
    }

    @Test func jsonHasExactlyTheConvosKeys() throws {
        let without = try Self.codec.encode(
            InviteJoinError(errorType: .conversationExpired, inviteTag: Self.tag, timestamp: Self.sentAt))
        let object = try Self.jsonObject(without)
        #expect(Set(object.keys) == ["errorType", "inviteTag", "timestamp"])
        #expect(object["errorType"] as? String == "conversation_expired")
        #expect(object["inviteTag"] as? String == Self.tag)
        #expect(object["timestamp"] as? String == "2026-01-07T10:02:03.456Z")

        let with = try Self.codec.encode(
            InviteJoinError(
                errorType: .singleUseConsumed, inviteTag: Self.tag, timestamp: Self.sentAt, reason: "used by bob"))
        let withObject = try Self.jsonObject(with)
        #expect(Set(withObject.keys) == ["errorType", "inviteTag", "timestamp", "reason"])
        #expect(withObject["reason"] as? String == "used by bob")
    }

    @Test func wireStringsAreSnakeCase() {
        let expected: [JoinErrorType: String] = [
            .conversationExpired: "conversation_expired",
            .conversationNotFound: "conversation_not_found",
            .inviteRevoked: "invite_revoked",
            .singleUseConsumed: "single_use_consumed",
            .genericFailure: "generic_failure",
            .requestRejected: "request_rejected",
            .invitationRemoved: "invitation_removed",
            .groupFull: "group_full",
        ]
        #expect(Set(JoinErrorType.allCases) == Set(expected.keys))
        for (type, wire) in expected {
            #expect(type.rawValue == wire)
            #expect(JoinErrorType(wire: wire) == type)
        }
    }

    @Test func decodesConvosShapedJSON() throws {
        let json = """
            {"errorType":"conversation_expired","inviteTag":"abc123","timestamp":"2026-01-07T10:00:00Z"}
            """
        let decoded = try Self.codec.decode(Self.content(json: json))
        #expect(decoded.errorType == .conversationExpired)
        #expect(decoded.inviteTag == "abc123")
        #expect(decoded.timestamp == Fixtures.date(ms: 1_767_780_000_000))
        #expect(decoded.reason == nil)

        // Explicit null reason, extra keys and fractional seconds are fine.
        let richer = """
            {"errorType":"invite_revoked","inviteTag":"abc123","timestamp":"2026-01-07T10:00:00.250Z",
             "reason":null,"retryAfter":30}
            """
        let second = try Self.codec.decode(Self.content(json: richer))
        #expect(second.errorType == .inviteRevoked)
        #expect(second.timestamp == Fixtures.date(ms: 1_767_780_000_250))
        #expect(second.reason == nil)
    }

    // MARK: Forward compatibility

    @Test func unknownTypeFromANewerClientIsAGenericFailure() throws {
        let json = """
            {"errorType":"member_limit_reached","inviteTag":"\(Self.tag)","timestamp":"2026-01-07T10:02:03.456Z",\
            "reason":"group is full"}
            """
        let decoded = try Self.codec.decode(Self.content(json: json))
        #expect(decoded.errorType == .genericFailure)
        #expect(decoded.rawErrorType == "member_limit_reached")
        #expect(decoded.inviteTag == Self.tag)
        #expect(decoded.reason == "group is full")
        #expect(Self.codec.summary(of: decoded).hasPrefix("Failed to join conversation."))
        // Passed on unchanged when re-encoded (e.g. relayed or stored).
        let object = try Self.jsonObject(try Self.codec.encode(decoded))
        #expect(object["errorType"] as? String == "member_limit_reached")

        for wire in ["", "CONVERSATION_EXPIRED", "conversationExpired", "conversation-expired"] {
            #expect(JoinErrorType(wire: wire) == .genericFailure, "\(wire)")
        }
    }

    /// `errorType` is a public var: setting it must change what is sent,
    /// not leave the wire string of the previous type.
    @Test func changingTheTypeChangesTheWireString() throws {
        var error = InviteJoinError(errorType: .genericFailure, inviteTag: Self.tag, timestamp: Self.sentAt)
        error.errorType = .conversationExpired
        let decoded = try Self.codec.decode(try Self.codec.encode(error))
        #expect(decoded.errorType == .conversationExpired)
        #expect(try Self.jsonObject(try Self.codec.encode(error))["errorType"] as? String == "conversation_expired")
    }

    // MARK: Malformed input

    @Test(
        "malformed bodies are typed errors",
        arguments: [
            "", "not json", "[]", "null", "{", "{}",
            #"{"inviteTag":"t","timestamp":"2026-01-07T10:00:00Z"}"#,
            #"{"errorType":"generic_failure","timestamp":"2026-01-07T10:00:00Z"}"#,
            #"{"errorType":"generic_failure","inviteTag":"t"}"#,
            #"{"errorType":5,"inviteTag":"t","timestamp":"2026-01-07T10:00:00Z"}"#,
            #"{"errorType":"generic_failure","inviteTag":["t"],"timestamp":"2026-01-07T10:00:00Z"}"#,
            #"{"errorType":"generic_failure","inviteTag":"t","timestamp":1767780000}"#,
            #"{"errorType":"generic_failure","inviteTag":"t","timestamp":"2026-01-07T10:00:00Z","reason":7}"#,
        ])
    func malformedJSON(_ json: String) {
        #expect(
            throws: ContentError.malformed(contentType: Self.contentTypeText, reason: "not the expected JSON")
        ) {
            try Self.codec.decode(Self.content(json: json))
        }
    }

    @Test(
        "timestamps that are not ISO 8601 are typed errors",
        arguments: ["", "yesterday", "2026-01-07", "07/01/2026 10:00", "1767780000", "2026-13-45T99:00:00Z"])
    func badTimestamp(_ timestamp: String) {
        let json = #"{"errorType":"generic_failure","inviteTag":"t","timestamp":"\#(timestamp)"}"#
        #expect(
            throws: ContentError.malformed(contentType: Self.contentTypeText, reason: "timestamp is not ISO 8601")
        ) {
            try Self.codec.decode(Self.content(json: json))
        }
    }

    @Test func oversizedBodyIsRefusedBeforeParsing() throws {
        let limit = InviteJoinErrorCodec.maxBodyBytes
        func body(size: Int) -> String {
            let empty =
                #"{"errorType":"generic_failure","inviteTag":"t","timestamp":"2026-01-07T10:00:00Z","reason":""}"#
            let reason = String(repeating: "x", count: size - empty.utf8.count)
            return
                #"{"errorType":"generic_failure","inviteTag":"t","timestamp":"2026-01-07T10:00:00Z","reason":"\#(reason)"}"#
        }
        #expect(try Self.codec.decode(Self.content(json: body(size: limit))).reason?.count ?? 0 > 4000)
        #expect(throws: ContentError.tooLarge(size: limit + 1, limit: limit)) {
            try Self.codec.decode(Self.content(json: body(size: limit + 1)))
        }
        // Not even JSON: the size is checked first.
        let huge = Data(repeating: 0x7B, count: 1_000_000)
        var content = Self.content(json: "")
        content.content = huge
        #expect(throws: ContentError.tooLarge(size: 1_000_000, limit: limit)) { try Self.codec.decode(content) }
    }

    @Test func encodingRefusesWhatDecodingWouldRefuse() throws {
        let limit = InviteJoinErrorCodec.maxBodyBytes
        let error = InviteJoinError(
            errorType: .genericFailure, inviteTag: "t", timestamp: Date(timeIntervalSince1970: 0),
            reason: String(repeating: "x", count: limit))
        #expect(throws: ContentError.self) { try Self.codec.encode(error) }
        var small = error
        small.reason = "short"
        #expect(try Self.codec.decode(Self.codec.encode(small)) == small)
    }

    // MARK: What the joiner reads

    @Test func userMessagesAreTheSeedTexts() {
        #expect(JoinErrorType.conversationExpired.userMessage == "This conversation is no longer available")
        #expect(JoinErrorType.conversationNotFound.userMessage == "This conversation is no longer available")
        #expect(JoinErrorType.genericFailure.userMessage == "Failed to join conversation")
        #expect(JoinErrorType.singleUseConsumed.userMessage == "This invite was already used by someone else")
        #expect(JoinErrorType.inviteRevoked.userMessage == "This invite is no longer valid")
        #expect(JoinErrorType.guidance == "Ask the person who invited you for a new invite.")
    }

    @Test(
        "fallback and summary say what the joiner's attempt says: the guidance, unless a new invite would not help",
        arguments: JoinErrorType.allCases)
    func fallbackAndSummary(_ type: JoinErrorType) {
        let error = InviteJoinError(errorType: type, inviteTag: Self.tag, timestamp: Self.sentAt, reason: "internal")
        let final: Set<JoinErrorType> = [.requestRejected, .groupFull]
        let expected =
            final.contains(type)
            ? "\(type.userMessage)." : "\(type.userMessage). Ask the person who invited you for a new invite."
        #expect(type.joinerMessage == expected)
        #expect(Self.codec.fallback(for: error) == expected)
        #expect(Self.codec.summary(of: error) == expected)
        // The reason is for logs, not for the joiner.
        #expect(!expected.contains("internal"))
        #expect(Self.codec.shouldPush(error))
    }

    // MARK: Through the registry

    @Test func throughARegistryThatKnowsTheCodec() throws {
        var registry = CodecRegistry()
        registry.register(TextCodec())
        registry.register(InviteJoinErrorCodec())
        let error = InviteJoinError(
            errorType: .conversationExpired, inviteTag: Self.tag, timestamp: Self.sentAt, reason: "exploded")
        let content = try registry.encode(error, with: InviteJoinErrorCodec())
        #expect(content.shouldPush)
        #expect(
            content.fallback
                == "This conversation is no longer available. Ask the person who invited you for a new invite.")

        let decoded = registry.decode(content)
        #expect(decoded.isKnown)
        #expect(decoded.contentType == InviteJoinErrorCodec.contentType)
        #expect(decoded.value as? InviteJoinError == error)
        #expect(decoded.displayText == content.fallback)

        // A minor version bump from a newer client still decodes.
        var newer = content
        newer.type.versionMinor = 3
        #expect(registry.decode(newer).value as? InviteJoinError == error)
    }

    @Test func throughARegistryThatDoesNotKnowTheCodec() throws {
        var sender = CodecRegistry()
        sender.register(InviteJoinErrorCodec())
        let error = InviteJoinError(errorType: .singleUseConsumed, inviteTag: Self.tag, timestamp: Self.sentAt)
        let content = try sender.encode(error, with: InviteJoinErrorCodec())

        var older = CodecRegistry()
        older.register(TextCodec())
        let decoded = older.decode(content)
        #expect(!decoded.isKnown)
        #expect(decoded.value == nil)
        #expect(decoded.contentType == InviteJoinErrorCodec.contentType)
        #expect(
            decoded.displayText
                == "This invite was already used by someone else. Ask the person who invited you for a new invite.")
    }

    @Test func malformedContentThroughTheRegistryFallsBack() throws {
        var registry = CodecRegistry()
        registry.register(InviteJoinErrorCodec())
        var content = Self.content(json: "{broken")
        content.fallback = "Failed to join conversation. Ask the person who invited you for a new invite."
        let decoded = registry.decode(content)
        #expect(!decoded.isKnown)
        #expect(decoded.displayText == content.fallback)
    }

    /// DESIGN.md lists the invite join error among the built-in codecs, and
    /// the seed asks for it to be registered at client start: the standard
    /// registry (what `RallyClient` uses by default) must know it, or the
    /// joiner's client only ever sees the fallback text and its state
    /// machine never learns the join failed.
    @Test func standardRegistryKnowsInviteJoinErrors() throws {
        #expect(CodecRegistry.standard.codec(for: InviteJoinErrorCodec.contentType) != nil)
        let error = InviteJoinError(errorType: .conversationExpired, inviteTag: Self.tag, timestamp: Self.sentAt)
        let content = try CodecRegistry.standard.encode(error, with: InviteJoinErrorCodec())
        #expect(CodecRegistry.standard.decode(content).value as? InviteJoinError == error)
    }
}
