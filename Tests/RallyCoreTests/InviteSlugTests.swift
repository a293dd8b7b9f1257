import Foundation
import RallyCore
import RallyCrypto
import RallyTestSupport
import RallyWire
import Testing

/// Realistic signed invites from seeded keys, so that every run replays
/// exactly. Shared by the invite test suites.
enum InviteFixtures {
    /// 2026-01-07T10:00:00Z, on a whole millisecond.
    static let now = Fixtures.date(ms: 1_767_780_000_000)
    static let nowMs: Int64 = 1_767_780_000_000
    static let weekMs: Int64 = 7 * 86_400_000

    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")

    static func identity(_ name: String, seed: UInt64) throws -> Identity {
        var random = SeededGenerator(seed: seed)
        return try Identity(
            signingKeyBytes: random.bytes(32), agreementKeyBytes: random.bytes(32), displayName: name,
            createdAt: Fixtures.created)
    }

    static func alice() throws -> Identity { try identity("Alice", seed: 0xA11CE) }
    static func mallory() throws -> Identity { try identity("Mallory", seed: 0xBAD) }

    static func payload(
        issuer: Identity, seed: UInt64 = 7, name: String = "Saturday climbing",
        description: String = "Bouldering at the usual gym, 10am.", expiresAtMs: Int64 = nowMs + weekMs
    ) -> WireInvitePayload {
        var random = SeededGenerator(seed: seed)
        var payload = WireInvitePayload()
        payload.inviteTag = random.bytes(Invite.tagByteCount)
        payload.issuer = issuer.publicIdentity.wireBundle
        // Sealed to the admins: random-looking, incompressible.
        payload.groupReference = random.bytes(80)
        payload.joinInboxID = issuer.inboxID.rawValue
        payload.name = name
        payload.description_p = description
        payload.imageURL = name.isEmpty ? "" : "https://img.rally.example/g/42.png"
        payload.expiresAtMs = expiresAtMs
        payload.maxUses = 10
        payload.role = .member
        payload.requiresApproval = true
        payload.createdAtMs = nowMs - 60_000
        return payload
    }

    static func signed(_ payload: WireInvitePayload, by issuer: Identity) -> WireSignedInvite {
        Invite.sign(payload, by: issuer)
    }

    /// A typical invite: name, short description, expires in a week.
    static func signedInvite() throws -> WireSignedInvite {
        let alice = try alice()
        return Invite.sign(payload(issuer: alice), by: alice)
    }

    static func slug(_ bytes: [UInt8]) -> String { Data(bytes).base64URLEncoded() }
    static func slug(header: UInt8, _ body: Data) -> String { (Data([header]) + body).base64URLEncoded() }

    /// Replaces the character at `offset`.
    static func replacing(_ text: String, at offset: Int, with character: Character) -> String {
        var characters = Array(text)
        characters[offset] = character
        return String(characters)
    }
}

/// What one decode + verify attempt ended in.
enum InviteOutcome: Equatable {
    case decodeFailed(InviteError)
    case verifyFailed(InviteError)
    case verified(Invite)

    static func of(_ slug: String, now: Date = InviteFixtures.now) -> InviteOutcome {
        let signed: WireSignedInvite
        do {
            signed = try InviteSlug.decode(slug)
        } catch {
            return .decodeFailed(error)
        }
        do {
            return .verified(try Invite.verify(signed, now: now))
        } catch {
            return .verifyFailed(error)
        }
    }
}

/// A fuzz target: decodes and verifies arbitrary bytes and must never crash,
/// hang or allocate without bound. The first byte chooses which layer the
/// rest reaches first, so a coverage-guided fuzzer gets past base64:
/// 0: pasted text (link parsing, then everything below),
/// 1: the slug's bytes (header, compression, protobuf),
/// 2: the inflated body (protobuf, keys, signature, expiry).
///
/// Wiring it to libFuzzer: move this function (and `InviteFixtures.now`)
/// into an executable target depending on RallyCore, add
///
///     @_cdecl("LLVMFuzzerTestOneInput")
///     public func rallyInviteFuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
///         fuzzOneInput(Data(bytes: start, count: count))
///         return 0
///     }
///
/// and build it with `swift build -c debug -Xswiftc -sanitize=fuzzer,address
/// -Xswiftc -parse-as-library --product <fuzz target>`; run the binary with a
/// corpus directory seeded with the slugs these tests produce. Here the
/// seeded loops below call it directly.
@discardableResult
func fuzzOneInput(_ data: Data) -> Invite? {
    guard let mode = data.first else { return try? Invite.parse("", now: InviteFixtures.now) }
    let rest = Data(data.dropFirst())
    switch mode % 3 {
    case 0:
        return try? Invite.parse(String(decoding: rest, as: UTF8.self), now: InviteFixtures.now)
    case 1:
        if case .verified(let invite) = InviteOutcome.of(rest.base64URLEncoded()) { return invite }
        return nil
    default:
        let slug = InviteFixtures.slug(header: 0x11, Deflate.compress(rest, format: .raw))
        if case .verified(let invite) = InviteOutcome.of(slug) { return invite }
        return nil
    }
}

@Suite("InviteSlug")
struct InviteSlugTests {
    struct Shape: Sendable, CustomTestStringConvertible {
        let label: String
        let name: String
        let description: String
        let deflated: Bool
        var testDescription: String { label }
    }

    static let shapes = [
        Shape(label: "no name, no description", name: "", description: "", deflated: false),
        Shape(label: "name only", name: "Saturday climbing", description: "", deflated: false),
        Shape(
            label: "name and short description", name: "Saturday climbing",
            description: "Bouldering at the usual gym, 10am.", deflated: false),
        Shape(
            label: "long description", name: "Saturday climbing",
            description: String(repeating: "Bring shoes, chalk and snacks. ", count: 40), deflated: true),
        Shape(
            label: "long unicode description", name: "Ciné-club 🎬",
            description: String(repeating: "Projection du jeudi — entrée libre 🍿. ", count: 25), deflated: true),
    ]

    static func signed(_ shape: Shape) throws -> WireSignedInvite {
        let alice = try InviteFixtures.alice()
        return Invite.sign(
            InviteFixtures.payload(issuer: alice, name: shape.name, description: shape.description), by: alice)
    }

    // MARK: Round trip

    @Test("realistic invites round trip", arguments: shapes)
    func roundTrip(_ shape: Shape) throws {
        let alice = try InviteFixtures.alice()
        let signed = try Self.signed(shape)
        let slug = InviteSlug.encode(signed)

        #expect(slug.utf8.count <= InviteSlug.maxCharacters)
        #expect(slug.utf8.allSatisfy { InviteFixtures.alphabet.contains(Character(UnicodeScalar($0))) })
        let decoded = try InviteSlug.decode(slug)
        #expect(decoded == signed)
        let invite = try Invite.verify(decoded, now: InviteFixtures.now)
        #expect(invite.payload.name == shape.name)
        #expect(invite.payload.description_p == shape.description)
        #expect(invite.issuer == alice.publicIdentity)
        #expect(
            invite.payload == InviteFixtures.payload(issuer: alice, name: shape.name, description: shape.description))
    }

    @Test("the header says version 1 and deflate only when it is shorter", arguments: shapes)
    func headerNibbles(_ shape: Shape) throws {
        let signed = try Self.signed(shape)
        let slug = InviteSlug.encode(signed)
        let bytes = try #require(Data(base64URLEncoded: slug))
        let header = try #require(bytes.first)
        #expect(header >> 4 == InviteSlug.version)
        #expect(header & 0x0F == (shape.deflated ? 1 : 0))

        let uncompressed = InviteFixtures.slug(header: 0x10, FrameCodec.encode(signed))
        if shape.deflated {
            #expect(slug.count < uncompressed.count)
        } else {
            #expect(slug == uncompressed)
        }
    }

    // MARK: Bad input, exact errors

    struct BadInput: Sendable, CustomTestStringConvertible {
        let label: String
        let slug: String
        let error: InviteError
        var testDescription: String { label }
    }

    static func badInputs() throws -> [BadInput] {
        let valid = InviteSlug.encode(try InviteFixtures.signedInvite())
        let middle = valid.count / 2
        let body = FrameCodec.encode(try InviteFixtures.signedInvite())
        let deflated = Deflate.compress(body, format: .raw)
        let garbage = Data(repeating: 0xFF, count: 48)

        func inserting(_ text: String) -> String {
            String(valid.prefix(middle)) + text + String(valid.dropFirst(middle))
        }

        var onlyPayload = WireSignedInvite()
        onlyPayload.payload = try InviteFixtures.signedInvite().payload
        var onlySignature = WireSignedInvite()
        onlySignature.signature = try InviteFixtures.signedInvite().signature

        return [
            BadInput(label: "empty", slug: "", error: .empty),
            BadInput(
                label: "one over the limit", slug: String(repeating: "A", count: InviteSlug.maxCharacters + 1),
                error: .tooLong(characters: InviteSlug.maxCharacters + 1, limit: InviteSlug.maxCharacters)),
            BadInput(
                label: "limit counted in UTF-8 bytes", slug: String(repeating: "é", count: 2_049),
                error: .tooLong(characters: 4_098, limit: InviteSlug.maxCharacters)),
            // Exactly at the limit is parsed: 3072 zero bytes, version 0.
            BadInput(
                label: "at the limit", slug: String(repeating: "A", count: InviteSlug.maxCharacters),
                error: .unsupportedVersion(0)),
            BadInput(label: "plus", slug: inserting("+"), error: .invalidEncoding),
            BadInput(label: "slash", slug: inserting("/"), error: .invalidEncoding),
            BadInput(label: "padding", slug: valid + "==", error: .invalidEncoding),
            BadInput(label: "padding inside", slug: inserting("=="), error: .invalidEncoding),
            BadInput(label: "space", slug: inserting(" "), error: .invalidEncoding),
            BadInput(label: "four spaces", slug: inserting("    "), error: .invalidEncoding),
            BadInput(label: "newline", slug: inserting("\n"), error: .invalidEncoding),
            BadInput(label: "dot", slug: inserting("...."), error: .invalidEncoding),
            BadInput(label: "accented letter", slug: inserting("éé"), error: .invalidEncoding),
            BadInput(label: "emoji", slug: inserting("🙂"), error: .invalidEncoding),
            BadInput(label: "one character", slug: "E", error: .invalidEncoding),
            BadInput(label: "header byte only, uncompressed", slug: InviteFixtures.slug([0x10]), error: .truncated),
            BadInput(label: "header byte only, deflate", slug: InviteFixtures.slug([0x11]), error: .truncated),
            BadInput(label: "version 0", slug: InviteFixtures.slug(header: 0x00, body), error: .unsupportedVersion(0)),
            BadInput(label: "version 2", slug: InviteFixtures.slug(header: 0x20, body), error: .unsupportedVersion(2)),
            BadInput(
                label: "version 15", slug: InviteFixtures.slug(header: 0xF1, deflated), error: .unsupportedVersion(15)),
            BadInput(
                label: "compression 2", slug: InviteFixtures.slug(header: 0x12, body),
                error: .unsupportedCompression(2)),
            BadInput(
                label: "compression 15", slug: InviteFixtures.slug(header: 0x1F, deflated),
                error: .unsupportedCompression(15)),
            BadInput(
                label: "invalid deflate block type", slug: InviteFixtures.slug(header: 0x11, Data([0xFF]) + garbage),
                error: .corruptCompression),
            BadInput(
                label: "deflate with trailing bytes", slug: InviteFixtures.slug(header: 0x11, deflated + Data([0, 1])),
                error: .corruptCompression),
            BadInput(
                label: "deflate cut in half",
                slug: InviteFixtures.slug(header: 0x11, deflated.prefix(deflated.count / 2)),
                error: .truncated),
            BadInput(
                label: "deflate of garbage", slug: InviteFixtures.slug(header: 0x11, Deflate.compress(garbage)),
                error: .malformed("not a signed invite")),
            BadInput(
                label: "deflate of nothing", slug: InviteFixtures.slug(header: 0x11, Deflate.compress(Data())),
                error: .malformed("not a signed invite")),
            BadInput(
                label: "uncompressed garbage", slug: InviteFixtures.slug(header: 0x10, garbage),
                error: .malformed("not a signed invite")),
            BadInput(
                label: "no signature", slug: InviteFixtures.slug(header: 0x10, FrameCodec.encode(onlyPayload)),
                error: .truncated),
            BadInput(
                label: "no payload", slug: InviteFixtures.slug(header: 0x10, FrameCodec.encode(onlySignature)),
                error: .truncated),
        ]
    }

    @Test func badInputsFailWithTheirExactError() throws {
        for input in try Self.badInputs() {
            #expect(throws: input.error, "\(input.label)") { try InviteSlug.decode(input.slug) }
        }
    }

    @Test func corruptDeflateIsCorruptOrTruncated() throws {
        // A protobuf read as deflate: its first byte announces a fixed
        // Huffman block, whatever follows is nonsense.
        let body = FrameCodec.encode(try InviteFixtures.signedInvite())
        #expect(throws: InviteError.self) { try InviteSlug.decode(InviteFixtures.slug(header: 0x11, body)) }
        do {
            _ = try InviteSlug.decode(InviteFixtures.slug(header: 0x11, body))
        } catch {
            #expect(error == .corruptCompression || error == .truncated, "\(error)")
        }
    }

    @Test func decompressionBombIsRefused() throws {
        // Megabytes of zeros deflate about 1000:1, so the slug fits the limit.
        let zeros = Data(count: 2 * 1024 * 1024)
        let packed = Deflate.compress(zeros, format: .raw)
        let slug = InviteFixtures.slug(header: 0x11, packed)
        #expect(slug.utf8.count <= InviteSlug.maxCharacters)
        #expect(throws: InviteError.decompressionBomb(limit: InviteSlug.maxInflatedBytes)) {
            try InviteSlug.decode(slug)
        }
    }

    /// A signed invite inflating to exactly the limit is accepted; one byte
    /// more is a bomb.
    @Test func inflatedLimitIsExact() throws {
        let alice = try InviteFixtures.alice()
        func signed(descriptionLength: Int) -> WireSignedInvite {
            let description = String(repeating: "x", count: descriptionLength)
            return Invite.sign(InviteFixtures.payload(issuer: alice, description: description), by: alice)
        }
        var length = 7_000
        while case let size = FrameCodec.encode(signed(descriptionLength: length)).count,
            size < InviteSlug.maxInflatedBytes
        {
            length += InviteSlug.maxInflatedBytes - size
        }
        let atLimit = signed(descriptionLength: length)
        try #require(FrameCodec.encode(atLimit).count == InviteSlug.maxInflatedBytes)
        let atLimitSlug = InviteSlug.encode(atLimit)
        #expect(try InviteSlug.decode(atLimitSlug) == atLimit)

        let over = FrameCodec.encode(signed(descriptionLength: length + 1))
        try #require(over.count == InviteSlug.maxInflatedBytes + 1)
        #expect(throws: InviteError.decompressionBomb(limit: InviteSlug.maxInflatedBytes)) {
            try InviteSlug.decode(InviteFixtures.slug(header: 0x11, Deflate.compress(over)))
        }
    }

    // MARK: Truncation and flips

    @Test("every truncation fails with a typed error", arguments: [shapes[2], shapes[3]])
    func everyTruncation(_ shape: Shape) throws {
        let signed = try Self.signed(shape)
        let slug = InviteSlug.encode(signed)
        for length in 1..<slug.count {
            let prefix = String(slug.prefix(length))
            let outcome = InviteOutcome.of(prefix)
            switch outcome {
            case .verified:
                Issue.record("prefix of \(length) of \(slug.count) characters verified")
            case .decodeFailed(let error):
                if length % 4 == 1 {
                    #expect(error == .invalidEncoding, "prefix \(length)")
                } else if length == 2 {
                    #expect(error == .truncated, "prefix \(length)")
                } else {
                    let expected: [InviteError] = [
                        .truncated, .corruptCompression, .malformed("not a signed invite"),
                    ]
                    #expect(expected.contains(error), "prefix \(length): \(error)")
                }
            case .verifyFailed(let error):
                // Only possible if the cut fell on a field boundary.
                #expect(error == .invalidSignature || Self.isMalformed(error), "prefix \(length): \(error)")
            }
        }
    }

    @Test("a changed character never yields a different verified invite", arguments: [shapes[1], shapes[3]])
    func everyCharacterFlip(_ shape: Shape) async throws {
        try await offThePool {
            let signed = try Self.signed(shape)
            let slug = InviteSlug.encode(signed)
            let alphabet = InviteFixtures.alphabet
            var decodedAfterFlip = 0
            let characters = Array(slug)
            for offset in 0..<characters.count {
                let original = characters[offset]
                let index = try #require(alphabet.firstIndex(of: original))
                for step in [1, 21, 32] {
                    let flipped = InviteFixtures.replacing(slug, at: offset, with: alphabet[(index + step) % 64])
                    switch InviteOutcome.of(flipped) {
                    case .decodeFailed:
                        break
                    case .verifyFailed(let error):
                        decodedAfterFlip += 1
                        #expect(
                            error == .invalidSignature || Self.isMalformed(error),
                            "offset \(offset) step \(step): \(error)")
                    case .verified(let invite):
                        // Only the unused low bits of the last character (base64)
                        // or of the last deflate byte can change without changing
                        // the bytes that are signed.
                        #expect(
                            invite.signed.payload == signed.payload && invite.signed.signature == signed.signature,
                            "offset \(offset) step \(step) verified a different invite")
                    }
                }
            }
            // Flips inside the payload decode and are caught by the signature.
            #expect(decodedAfterFlip > 0)
        }
    }

    static func isMalformed(_ error: InviteError) -> Bool {
        if case .malformed = error { return true }
        return false
    }

    // MARK: Seeded fuzzing

    @Test func randomBase64URLStringsNeverVerify() {
        var random = SeededGenerator(seed: 0x5106)
        var reachedProtobuf = 0
        for _ in 0..<3_000 {
            let length = Int.random(in: 0...700, using: &random)
            var text = String((0..<length).map { _ in InviteFixtures.alphabet.randomElement(using: &random)! })
            // Give a quarter of them a valid header so they reach the layers below.
            if length > 2, Bool.random(using: &random), Bool.random(using: &random) {
                text = (Bool.random(using: &random) ? "EA" : "EQ") + text.dropFirst(2)
            }
            switch InviteOutcome.of(text) {
            case .verified:
                Issue.record("random text verified: \(text)")
            case .decodeFailed(.malformed), .decodeFailed(.truncated), .decodeFailed(.corruptCompression),
                .verifyFailed:
                reachedProtobuf += 1
            case .decodeFailed:
                break
            }
            #expect(fuzzOneInput(Data([0]) + Data(text.utf8)) == nil)
        }
        #expect(reachedProtobuf > 100)
    }

    @Test func randomMutationsOfValidSlugsNeverVerifyChangedBytes() throws {
        var random = SeededGenerator(seed: 0xF022)
        let originals = try [Self.signed(Self.shapes[2]), Self.signed(Self.shapes[3])]
        let alphabet = InviteFixtures.alphabet
        for round in 0..<2_000 {
            let signed = originals[round % 2]
            var characters = Array(InviteSlug.encode(signed))
            for _ in 0..<Int.random(in: 1...4, using: &random) {
                let offset = Int.random(in: 0..<characters.count, using: &random)
                switch Int.random(in: 0..<3, using: &random) {
                case 0: characters[offset] = alphabet.randomElement(using: &random)!
                case 1: characters.insert(alphabet.randomElement(using: &random)!, at: offset)
                default: if characters.count > 1 { characters.remove(at: offset) }
                }
            }
            let mutated = String(characters)
            if case .verified(let invite) = InviteOutcome.of(mutated) {
                #expect(
                    invite.signed.payload == signed.payload && invite.signed.signature == signed.signature,
                    "mutation verified a different invite: \(mutated)")
            }
            if let invite = fuzzOneInput(Data([0]) + Data(mutated.utf8)) {
                #expect(invite.signed.payload == signed.payload && invite.signed.signature == signed.signature)
            }
        }
    }

    @Test func fuzzTargetSurvivesArbitraryBytesInEveryMode() async throws {
        try await offThePool {
            var random = SeededGenerator(seed: 0xB17E5)
            let body = FrameCodec.encode(try InviteFixtures.signedInvite())
            for round in 0..<3_000 {
                let mode = UInt8(round % 3)
                var bytes: Data
                if Bool.random(using: &random) {
                    bytes = random.bytes(Int.random(in: 0...600, using: &random))
                } else {
                    // Near a real invite: a few bytes changed.
                    bytes = round % 3 == 1 ? Data([0x10]) + body : body
                    for _ in 0..<Int.random(in: 1...3, using: &random) {
                        let offset = Int.random(in: 0..<bytes.count, using: &random)
                        bytes[offset] ^= UInt8.random(in: 1...255, using: &random)
                    }
                }
                #expect(fuzzOneInput(Data([mode]) + bytes) == nil, "round \(round)")
            }
            // And the unchanged invite does verify in the two binary modes.
            #expect(fuzzOneInput(Data([1, 0x10]) + body) != nil)
            #expect(fuzzOneInput(Data([2]) + body) != nil)
            #expect(fuzzOneInput(Data()) == nil)
        }
    }
}
