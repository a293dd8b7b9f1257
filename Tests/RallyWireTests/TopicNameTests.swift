import Foundation
import RallyWire
import Testing

@Suite("TopicName")
struct TopicNameTests {
    static let inboxID = "mzuhvlpymk6xo3epygfy5h4oeaejofef"
    static let groupID = String(repeating: "0123456789abcdef", count: 4)

    struct Valid: Sendable, CustomTestStringConvertible {
        let raw: String
        let kind: TopicName.Kind
        let id: String
        var testDescription: String { raw }
    }

    static let valid: [Valid] = [
        Valid(raw: "inbox/" + inboxID, kind: .inbox, id: inboxID),
        Valid(raw: "group/" + groupID, kind: .group, id: groupID),
        Valid(raw: "join/request-1", kind: .other("join"), id: "request-1"),
        Valid(raw: "call_room/a.b-c_d", kind: .other("call_room"), id: "a.b-c_d"),
        Valid(raw: "a/b", kind: .other("a"), id: "b"),
        Valid(raw: "9/0", kind: .other("9"), id: "0"),
        Valid(
            raw: "x/" + String(repeating: "y", count: WireLimits.maxTopicLength - 2), kind: .other("x"),
            id: String(repeating: "y", count: WireLimits.maxTopicLength - 2)),
    ]

    @Test("valid names parse into kind and id", arguments: valid)
    func validNames(_ sample: Valid) throws {
        let topic = try TopicName(validating: sample.raw)
        #expect(topic.rawValue == sample.raw)
        #expect(topic.description == sample.raw)
        #expect(topic.kind == sample.kind)
        #expect(topic.id == sample.id)
        #expect(topic == (try TopicName(validating: sample.raw)))
    }

    @Test func inboxAndGroupConstructorsBuildTheirKinds() throws {
        let inbox = try TopicName.inbox(Self.inboxID)
        #expect(inbox.rawValue == "inbox/" + Self.inboxID)
        #expect(inbox.kind == .inbox)
        #expect(inbox.id == Self.inboxID)
        let group = try TopicName.group(Self.groupID)
        #expect(group.kind == .group)
        #expect(group.id == Self.groupID)
        #expect(throws: TopicNameError.malformed("inbox/")) { try TopicName.inbox("") }
        #expect(throws: TopicNameError.invalidCharacter("group/ABC")) { try TopicName.group("ABC") }
        #expect(throws: TopicNameError.malformed("inbox/a/b")) { try TopicName.inbox("a/b") }
    }

    struct Invalid: Sendable, CustomTestStringConvertible {
        let label: String
        let raw: String
        let error: TopicNameError
        var testDescription: String { label }
    }

    static let tooLong = "x/" + String(repeating: "y", count: WireLimits.maxTopicLength - 1)
    static let tooLongMultibyte = "inbox/" + String(repeating: "é", count: 80)

    static let invalid: [Invalid] = [
        Invalid(label: "empty", raw: "", error: .empty),
        Invalid(label: "one byte too long", raw: tooLong, error: .tooLong(WireLimits.maxTopicLength + 1)),
        Invalid(label: "too long in UTF-8 bytes", raw: tooLongMultibyte, error: .tooLong(166)),
        Invalid(label: "uppercase kind", raw: "Inbox/abc", error: .invalidCharacter("Inbox/abc")),
        Invalid(label: "uppercase id", raw: "inbox/ABC", error: .invalidCharacter("inbox/ABC")),
        Invalid(label: "space", raw: "inbox/a b", error: .invalidCharacter("inbox/a b")),
        Invalid(label: "leading space", raw: " inbox/ab", error: .invalidCharacter(" inbox/ab")),
        Invalid(label: "newline", raw: "inbox/ab\n", error: .invalidCharacter("inbox/ab\n")),
        Invalid(label: "NUL", raw: "inbox/a\u{0}b", error: .invalidCharacter("inbox/a\u{0}b")),
        Invalid(label: "backslash", raw: "inbox/a\\b", error: .invalidCharacter("inbox/a\\b")),
        Invalid(label: "percent escape", raw: "inbox/%2e%2e", error: .invalidCharacter("inbox/%2e%2e")),
        Invalid(label: "non-ASCII letter", raw: "inbox/café", error: .invalidCharacter("inbox/café")),
        Invalid(label: "emoji", raw: "group/🎉", error: .invalidCharacter("group/🎉")),
        Invalid(label: "fullwidth solidus", raw: "inbox／abc", error: .malformed("inbox／abc")),
        Invalid(label: "missing slash", raw: "inboxabc", error: .malformed("inboxabc")),
        Invalid(label: "empty id", raw: "inbox/", error: .malformed("inbox/")),
        Invalid(label: "empty kind", raw: "/abc", error: .malformed("/abc")),
        Invalid(label: "only a slash", raw: "/", error: .malformed("/")),
        Invalid(label: "two slashes", raw: "inbox/a/b", error: .malformed("inbox/a/b")),
        Invalid(label: "double slash", raw: "inbox//b", error: .malformed("inbox//b")),
        Invalid(label: "trailing slash", raw: "inbox/abc/", error: .malformed("inbox/abc/")),
        Invalid(label: "path traversal", raw: "inbox/../group", error: .malformed("inbox/../group")),
    ]

    @Test("invalid names give the exact error", arguments: invalid)
    func invalidNames(_ sample: Invalid) {
        #expect(throws: sample.error) { try TopicName(validating: sample.raw) }
    }

    @Test func exactlyTheMaximumLengthIsAccepted() throws {
        let raw = "x/" + String(repeating: "y", count: WireLimits.maxTopicLength - 2)
        #expect(raw.utf8.count == WireLimits.maxTopicLength)
        #expect(try TopicName(validating: raw).rawValue == raw)
    }

    /// A topic is addressed over the HTTP fallback as `/v1/topics/<kind>/<id>`;
    /// a kind or id that is a dot segment ("." or "..") is removed by URL
    /// normalization (RFC 3986, 5.2.4), so such a name cannot be fetched and
    /// reads like a traversal. It should be rejected as malformed.
    @Test("dot-segment kinds and ids are rejected", arguments: ["inbox/..", "inbox/.", "../abc", "./abc", "../.."])
    func dotSegmentsAreRejected(_ raw: String) {
        #expect(throws: TopicNameError.malformed(raw)) { try TopicName(validating: raw) }
    }

    @Test func dotsInsideANameAreFine() throws {
        let topic = try TopicName(validating: "v1.calls/room..1")
        #expect(topic.kind == .other("v1.calls"))
        #expect(topic.id == "room..1")
    }

    @Test func equalNamesAreEqualAndHashTheSame() throws {
        let a = try TopicName(validating: "group/abc")
        let b = try TopicName(validating: "group/abc")
        let c = try TopicName(validating: "group/abd")
        #expect(a == b)
        #expect(a.hashValue == b.hashValue)
        #expect(a != c)
        #expect(Set([a, b, c]).count == 2)
    }

    @Test func errorDescriptionsNameTheProblem() {
        #expect(TopicNameError.empty.description == "topic name is empty")
        #expect(TopicNameError.tooLong(200).description == "topic name is 200 bytes; the limit is 160")
        #expect(TopicNameError.malformed("x").description.contains("\"x\""))
        #expect(TopicNameError.invalidCharacter("X/y").description.contains("\"X/y\""))
    }

    /// The rules as first written, on `String`'s characters: the byte scan
    /// in `TopicName(validating:)` must answer every input as they do.
    static func reference(_ raw: String) -> Result<Parsed, TopicNameError> {
        guard !raw.isEmpty else { return .failure(.empty) }
        guard raw.utf8.count <= WireLimits.maxTopicLength else { return .failure(.tooLong(raw.utf8.count)) }
        let parts = raw.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else { return .failure(.malformed(raw)) }
        guard !parts.contains(where: { $0 == "." || $0 == ".." }) else { return .failure(.malformed(raw)) }
        let allowed = Set("abcdefghijklmnopqrstuvwxyz0123456789-_/.".utf8)
        guard raw.utf8.allSatisfy(allowed.contains) else { return .failure(.invalidCharacter(raw)) }
        let id = String(parts[1])
        switch parts[0] {
        case "inbox": return .success(Parsed(kind: .inbox, id: id))
        case "group": return .success(Parsed(kind: .group, id: id))
        default: return .success(Parsed(kind: .other(String(parts[0])), id: id))
        }
    }

    struct Parsed: Equatable {
        let kind: TopicName.Kind
        let id: String
    }

    @Test("random names, hostile ones among them, get the answer of the rules as first written")
    func sameAnswersAsTheReference() {
        var random = SeededGenerator(seed: 0x70_91C)
        let alphabet: [String] = [
            "a", "z", "0", "9", "-", "_", ".", "/", "/", "..", "A", " ", "é", "\u{301}", "\u{0}", "%", "inbox", "group",
        ]
        var inputs = ["/", "//", "./x", "x/.", "../x", "x/..", "x/.../", "/\u{301}x", "x/\u{301}", "é/x"]
        inputs.append("x/" + String(repeating: "y", count: WireLimits.maxTopicLength - 1))
        for _ in 0..<20_000 {
            inputs.append(
                (0..<Int.random(in: 0...8, using: &random)).map { _ in alphabet.randomElement(using: &random)! }
                    .joined())
        }
        for raw in inputs {
            let got = Result { () throws(TopicNameError) in try TopicName(validating: raw) }
            switch (got, Self.reference(raw)) {
            case (.success(let topic), .success(let parsed)):
                #expect(
                    Parsed(kind: topic.kind, id: topic.id) == parsed && topic.rawValue == raw, "\(raw.debugDescription)"
                )
            case (.failure(let error), .failure(let expected)):
                #expect(error == expected, "\(raw.debugDescription)")
            case (let got, let expected):
                Issue.record("\(raw.debugDescription): \(got) instead of \(expected)")
            }
        }
    }
}
