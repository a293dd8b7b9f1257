import Foundation
import RallyCore
import RallyCrypto
import RallyTestSupport
import Testing

/// Links and tokens shared by the deep-link suites.
enum DeepLinkFixtures {
    /// A token from fixed bytes 0…31.
    static let token = try! NomineeToken(bytes: Data(0..<32))
    static let tokenText = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"

    static func slug() throws -> String { InviteSlug.encode(try InviteFixtures.signedInvite()) }

    static func nominee(
        _ vault: String = "Family photos", _ status: NomineeLinkStatus = .accepted
    ) throws
        -> NomineeInviteLink
    {
        try NomineeInviteLink(token: token, vaultName: vault, status: status)
    }

    /// The nominee link in the seed's parameter order, with raw `query`
    /// parameters appended.
    static func seedOrder(vault: String = "Family", status: String? = "pending", extra: String = "") -> String {
        var link = "rally://nominee/invite?token=\(tokenText)&vault=\(vault)"
        if let status { link += "&status=\(status)" }
        return link + extra
    }

    static let vaultNames = [
        "Family", "My Vault", "a&b=c#d?e", "100% sure", "+plus+", "/slash/?x=1#y", "🎉 party", "👨‍👩‍👧 family",
        "Ünïcødé naïve café", "~-._", "  spaced  ", "日本語の金庫", "%41 literal", "back\\slash",
        String(repeating: "x", count: NomineeInviteLink.maxVaultNameBytes),
        String(repeating: "é", count: NomineeInviteLink.maxVaultNameBytes / 2),
    ]
}

/// Asserts that a parsed link writes back to text that parses to it.
func expectRoundTrip(_ link: DeepLink, sourceLocation: SourceLocation = #_sourceLocation) {
    do {
        let again = try DeepLinkRouter.parse(link.url)
        #expect(again == link, sourceLocation: sourceLocation)
    } catch {
        Issue.record("\(link.url.prefix(60)) does not parse back: \(error)", sourceLocation: sourceLocation)
    }
}

@Suite("DeepLinkRouter")
struct DeepLinkRouterTests {
    typealias F = DeepLinkFixtures

    func error(_ text: String) -> DeepLinkError? {
        do {
            _ = try DeepLinkRouter.parse(text)
            return nil
        } catch {
            return error
        }
    }

    // MARK: Invite links

    @Test func everyJoinFormGivesTheSlugRallyJoinReads() throws {
        let slug = try F.slug()
        let lowercase = [
            "rally://join/\(slug)",
            "https://rally.example/join#\(slug)",
            "https://rally.example/join/\(slug)",
            "https://rally.example:8443/join#\(slug)",
            "http://127.0.0.1:8080/join#\(slug)",
            "http://localhost:8080/join/\(slug)",
            // The tolerance of `rally join` for decorated web links.
            "https://rally.example/join?utm_source=qr#\(slug)",
            "https://rally.example/join/\(slug)?utm_source=qr",
        ]
        for text in lowercase {
            #expect(try DeepLinkRouter.parse(text) == .join(slug: slug), "\(text.prefix(50))")
            #expect(try InviteLink.slug(from: text) == slug)
        }
        // Scheme and rally:// host are case-insensitive; whitespace around is ignored.
        for text in [
            "RALLY://join/\(slug)", "Rally://JOIN/\(slug)", "HTTPS://rally.example/join#\(slug)",
            "  rally://join/\(slug)\n", "\t\nhttps://rally.example/join/\(slug) \r\n",
        ] {
            #expect(try DeepLinkRouter.parse(text) == .join(slug: slug), "\(text.prefix(50))")
        }
        #expect(DeepLink.join(slug: slug).url == "rally://join/\(slug)")
        expectRoundTrip(.join(slug: slug))
    }

    @Test func malformedJoinLinksSayWhatIsWrong() throws {
        let slug = try F.slug()
        let rallyForm = DeepLinkError.invalidJoinLink("expected rally://join/<invite> with nothing after the invite")
        let webForm = DeepLinkError.invalidJoinLink(
            "expected https://<host>/join#<invite> or https://<host>/join/<invite>")
        let half = String(slug.prefix(slug.count / 2))
        var halfProblem = ""
        do throws(InviteError) {
            _ = try InviteSlug.decode(half)
            Issue.record("half a slug decodes")
        } catch {
            halfProblem = error.description
        }
        let cases: [(String, DeepLinkError)] = [
            ("rally://join", rallyForm),
            ("rally://join/", rallyForm),
            ("rally://join/\(slug)/x", rallyForm),
            ("rally://join/\(slug)?x=1", rallyForm),
            ("rally://join/\(slug)#x", rallyForm),
            ("rally://join?\(slug)", rallyForm),
            ("https://rally.example/join", webForm),
            ("https://rally.example/join#", webForm),
            ("https://rally.example/join/", webForm),
            ("https://rally.example/join/\(slug)/x", webForm),
            ("rally://join/ab%20cd", .invalidJoinLink(InviteError.invalidEncoding.description)),
            ("rally://join/ab+cd", .invalidJoinLink(InviteError.invalidEncoding.description)),
            ("rally://join/\(half)", .invalidJoinLink(halfProblem)),
            (
                "rally://join/" + String(repeating: "A", count: InviteSlug.maxCharacters + 1),
                .invalidJoinLink(
                    InviteError.tooLong(characters: InviteSlug.maxCharacters + 1, limit: InviteSlug.maxCharacters)
                        .description)
            ),
        ]
        for (text, expected) in cases {
            #expect(error(text) == expected, "\(text.prefix(60))")
        }
        #expect(error("rally://join/AAAA")?.description.hasPrefix("this invite link cannot be used: ") == true)
    }

    // MARK: Nominee links

    @Test("nominee links round trip, whatever the vault is called", arguments: DeepLinkFixtures.vaultNames)
    func nomineeRoundTrip(vault: String) throws {
        for status in NomineeLinkStatus.allCases {
            let link = try F.nominee(vault, status)
            let url = link.url
            #expect(try DeepLinkRouter.parse(url) == .nomineeInvite(link))
            #expect(url.hasPrefix("rally://nominee/invite?vault="))
            #expect(url.hasSuffix("&token=\(F.tokenText)"))
            let query = url.dropFirst("rally://nominee/invite?".count)
            #expect(query.split(separator: "&").count == 3)
            #expect(!query.contains("#") && !query.contains(" ") && !query.contains("+"))
            #expect(query.unicodeScalars.allSatisfy { $0.isASCII })
        }
    }

    @Test func theVaultNameIsPercentEncodedAsUTF8() throws {
        #expect(try F.nominee("a b&c=d#e?f🎉").url.contains("vault=a%20b%26c%3Dd%23e%3Ff%F0%9F%8E%89&"))
        #expect(try F.nominee("~x-y.z_").url.contains("vault=~x-y.z_&"))
    }

    @Test func theSeedsOrderAndEveryOtherOrderParseTheSame() throws {
        let parameters = ["token=\(F.tokenText)", "vault=My%20Vault", "status=declined"]
        let expected = DeepLink.nomineeInvite(try F.nominee("My Vault", .declined))
        for order in [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]] {
            let text = "rally://nominee/invite?" + order.map { parameters[$0] }.joined(separator: "&")
            #expect(try DeepLinkRouter.parse(text) == expected)
        }
    }

    @Test func statusDefaultsToPendingAndValuesArePercentDecoded() throws {
        #expect(try DeepLinkRouter.parse(F.seedOrder(status: nil)) == .nomineeInvite(try F.nominee("Family", .pending)))
        // Raw (unencoded) text survives as itself; `+` is a plus.
        #expect(
            try DeepLinkRouter.parse(F.seedOrder(vault: "Our 🎉 a+b=c?d", status: "accepted"))
                == .nomineeInvite(try F.nominee("Our 🎉 a+b=c?d", .accepted)))
        // Every value is percent-decoded, the token and status too.
        let encoded =
            "rally://nominee/invite?token=%41AECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8&vault=%f0%9f%8e%89&status=%61ccepted"
        #expect(try DeepLinkRouter.parse(encoded) == .nomineeInvite(try F.nominee("🎉", .accepted)))
    }

    @Test func schemeAndHostAreCaseInsensitivePathsAndNamesAreNot() throws {
        let upper = "RALLY://NOMINEE/invite?token=\(F.tokenText)&vault=x"
        #expect(try DeepLinkRouter.parse(upper) == .nomineeInvite(try F.nominee("x", .pending)))
        #expect(error("rally://nominee/INVITE?token=\(F.tokenText)&vault=x") == .unknownLink("nominee/INVITE"))
        #expect(error("rally://nominee/invite?TOKEN=\(F.tokenText)&vault=x") == .unknownParameter("TOKEN"))
        #expect(error(F.seedOrder(status: "Pending")) == .invalidStatus("Pending"))
    }

    @Test func everyNomineeErrorIsTheSpecificOne() throws {
        let t = F.tokenText
        let base = "rally://nominee/invite?"
        let cases: [(String, DeepLinkError)] = [
            (String(base.dropLast()), .missingParameter("token")),
            (base, .malformedQuery("an empty parameter (\"&&\", or \"&\" at an end)")),
            (base + "vault=x", .missingParameter("token")),
            (base + "token=\(t)", .missingParameter("vault")),
            (base + "token=\(t)&status=pending", .missingParameter("vault")),
            (base + "token=\(t)&&vault=x", .malformedQuery("an empty parameter (\"&&\", or \"&\" at an end)")),
            (base + "token=\(t)&vault=x&", .malformedQuery("an empty parameter (\"&&\", or \"&\" at an end)")),
            (base + "token=\(t)&vault", .malformedQuery("a parameter without \"=\"")),
            (base + "token=\(t)&=x&vault=x", .malformedQuery("a parameter without a name")),
            (base + "token=\(t)&vault=x&token=\(t)", .duplicateParameter("token")),
            (base + "token=\(t)&vault=x&vault=x", .duplicateParameter("vault")),
            (base + "token=\(t)&vault=x&status=pending&status=pending", .duplicateParameter("status")),
            (base + "token=\(t)&vault=x&utm_source=qr", .unknownParameter("utm_source")),
            (base + "tok%65n=\(t)&vault=x", .unknownParameter("tok%65n")),
            (base + "token=\(t)&vault=x#top", .unexpectedFragment),
            (base + "token=\(t)&vault=%ZZ", .invalidPercentEncoding(parameter: "vault")),
            (base + "token=\(t)&vault=ab%4", .invalidPercentEncoding(parameter: "vault")),
            (base + "token=\(t)&vault=%", .invalidPercentEncoding(parameter: "vault")),
            (base + "token=\(t)&vault=%FF", .invalidPercentEncoding(parameter: "vault")),
            (base + "token=\(t)&vault=%C3", .invalidPercentEncoding(parameter: "vault")),
            (base + "token=\(t)&vault=x&status=%G0", .invalidPercentEncoding(parameter: "status")),
            (base + "token=%4&vault=x", .invalidPercentEncoding(parameter: "token")),
            (base + "token=&vault=x", .invalidToken(.length(characters: 0))),
            (base + "token=\(t.dropLast())&vault=x", .invalidToken(.length(characters: 42))),
            (base + "token=\(t)A&vault=x", .invalidToken(.length(characters: 44))),
            (base + "token=\(t.dropLast())+&vault=x", .invalidToken(.alphabet)),
            (base + "token=\(t.dropLast())h&vault=x", .invalidToken(.nonCanonical)),
            (base + "token=\(t)&vault=", .invalidVaultName(.empty)),
            (base + "token=\(t)&vault=\(String(repeating: "x", count: 257))", .invalidVaultName(.tooLong(bytes: 257))),
            (
                base + "token=\(t)&vault=\(String(repeating: "%C3%A9", count: 129))",
                .invalidVaultName(.tooLong(bytes: 258))
            ),
            (base + "token=\(t)&vault=a%0Ab", .invalidVaultName(.controlCharacter)),
            (base + "token=\(t)&vault=a%00", .invalidVaultName(.controlCharacter)),
            (base + "token=\(t)&vault=a%1B[31m", .invalidVaultName(.controlCharacter)),
            (base + "token=\(t)&vault=a%C2%9Bb", .invalidVaultName(.controlCharacter)),
            (base + "token=\(t)&vault=evil%E2%80%AEgpj.exe", .invalidVaultName(.controlCharacter)),
            (base + "token=\(t)&vault=x&status=", .invalidStatus("")),
            (base + "token=\(t)&vault=x&status=done", .invalidStatus("done")),
            ("rally://nominee/accept?token=\(t)&vault=x", .unknownLink("nominee/accept")),
            ("rally://nominee/invite/\(t)", .unknownLink("nominee/invite/\(t.prefix(25))…")),
            ("rally://nominee?token=\(t)&vault=x", .unknownLink("nominee")),
            ("rally://nominee", .unknownLink("nominee")),
        ]
        for (text, expected) in cases {
            #expect(error(text) == expected, "\(text.prefix(80))")
        }
    }

    @Test func linksRallyDoesNotKnow() {
        let cases: [(String, DeepLinkError)] = [
            ("", .empty),
            (" \n\t\r\n ", .empty),
            ("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8", .notALink),
            ("join/abc", .notALink),
            (":rally://join/abc", .notALink),
            ("1rally://join/abc", .notALink),
            ("ral ly://join/abc", .notALink),
            ("ftp://rally.example/join/abc", .unknownScheme("ftp")),
            ("javascript:alert(1)", .unknownScheme("javascript")),
            ("rallyx://join/abc", .unknownScheme("rallyx")),
            ("wss://rally.example/join/abc", .unknownScheme("wss")),
            ("mailto:someone@example.com", .unknownScheme("mailto")),
            (
                String(repeating: "s", count: 100) + "://x",
                .unknownScheme(String(repeating: "s", count: 40) + "…")
            ),
            ("rally:join/abc", .unknownLink("join/abc")),
            ("rally:/join/abc", .unknownLink("/join/abc")),
            ("https:rally.example/join#abc", .unknownLink("rally.example/join#abc")),
            ("rally://invite/abc", .unknownLink("invite/abc")),
            ("rally://", .unknownLink("")),
            ("rally://join:80/abc", .unknownLink("join:80/abc")),
            ("rally://evil\u{1B}[2J/x?y", .unknownLink("evil\u{FFFD}[2J/x")),
            ("https://rally.example/not-an-invite", .unknownLink("rally.example/not-an-invite")),
            ("https://rally.example/joins#abc", .unknownLink("rally.example/joins")),
            ("https://rally.example", .unknownLink("rally.example")),
            ("https://rally.example/nominee/invite?token=x", .unknownLink("rally.example/nominee/invite")),
        ]
        for (text, expected) in cases {
            #expect(error(text) == expected, "\(text.prefix(80))")
        }
    }

    @Test func theLengthLimitIsExact() throws {
        let limit = DeepLinkRouter.maxLinkCharacters
        #expect(error(String(repeating: "a", count: limit + 1)) == .tooLong(limit + 1))
        #expect(error(String(repeating: "é", count: limit / 2 + 1)) == .tooLong(limit + 2))
        #expect(error(String(repeating: "a", count: limit)) == .notALink)
        // A valid link padded to exactly the limit still parses; one more byte does not.
        let url = try F.nominee().url
        let padded = url + String(repeating: " ", count: limit - url.utf8.count)
        #expect(try DeepLinkRouter.parse(padded) == .nomineeInvite(try F.nominee()))
        #expect(error(padded + " ") == .tooLong(limit + 1))
        #expect(error(String(repeating: "a", count: 10 * limit)) == .tooLong(10 * limit))
    }

    @Test func errorsNeverEchoATokenOrAWholeLink() throws {
        let t = F.tokenText
        let hostile = [
            F.seedOrder(status: "nope"), F.seedOrder(extra: "&utm=1"), F.seedOrder(extra: "#frag"),
            F.seedOrder(vault: "%ZZ"), F.seedOrder(vault: "a%0A"), F.seedOrder(extra: "&token=\(t)"),
            "rally://nominee/invite?token=\(t)", "rally://nominee/invite?vault=x&token=\(t)x",
            "rally://nominee/invite?vault=x&\(t)=1", "rally://other/\(t)",
            "rally://join/\(t)", "https://rally.example/page/\(t)", t,
        ]
        for text in hostile {
            guard let problem = error(text) else {
                Issue.record("\(text) parsed")
                continue
            }
            let message = problem.description
            #expect(!message.contains(t), "\(message)")
            #expect(!message.contains(text), "\(message)")
            #expect(message.count < 200)
        }
    }

    @Test func descriptionsSayWhatToDo() {
        #expect(DeepLinkError.empty.description == "the link is empty")
        #expect(DeepLinkError.tooLong(9000).description == "the link is 9000 bytes long; links are at most 8192")
        #expect(
            DeepLinkError.missingParameter("token").description
                == "the link has no \"token\" parameter: it was probably cut when copied")
        #expect(
            DeepLinkError.unknownParameter("utm").description
                == "the link has a parameter Rally does not know (\"utm\"); it was refused rather than ignored")
        #expect(
            DeepLinkError.invalidToken(.length(characters: 42)).description
                == "the nominee token is not valid: it has 42 characters, a token has 43: the link was probably cut when copied"
        )
        #expect(
            DeepLinkError.invalidStatus("done").description
                == "\"done\" is not a nominee invite status: expected one of pending, accepted, declined")
        #expect(
            DeepLinkError.unknownScheme("ftp").description
                == "\"ftp:\" links are not Rally links: expected rally://join/…, https://<host>/join#… or rally://nominee/invite?…"
        )
        #expect(
            DeepLinkError.invalidVaultName(.tooLong(bytes: 300)).description
                == "the vault name is 300 bytes long; vault names are at most 255")
        #expect(
            DeepLinkError.invalidJoinLink("x").description == "this invite link cannot be used: x")
    }

    @Test func aLinkCannotBeMadeWithAVaultNameNoLinkCouldCarry() {
        let cases: [(String, DeepLinkError.VaultNameProblem)] = [
            ("", .empty), (String(repeating: "x", count: 257), .tooLong(bytes: 257)), ("a\nb", .controlCharacter),
            ("\u{202E}", .controlCharacter), ("a\u{7F}", .controlCharacter), ("tab\t", .controlCharacter),
        ]
        for (name, problem) in cases {
            #expect(throws: DeepLinkError.invalidVaultName(problem)) {
                try NomineeInviteLink(token: .random(), vaultName: name)
            }
        }
        // Joiners and variation selectors in emoji are fine.
        #expect((try? NomineeInviteLink(token: .random(), vaultName: "👨‍👩‍👧 ❤️")) != nil)
    }

    // MARK: Truncation

    @Test func everyPrefixOfACanonicalLinkParsesTheSameOrFails() throws {
        let links: [DeepLink] = [
            .join(slug: try F.slug()),
            .nomineeInvite(try F.nominee("Family photos 🎉 & more", .accepted)),
            .nomineeInvite(try F.nominee("x", .declined)),
            .nomineeInvite(try F.nominee("a=b#c?d&e", .pending)),
        ]
        var forms = links.map { ($0, $0.url) }
        if case .join(let slug) = links[0] {
            forms.append((links[0], "https://rally.example/join#\(slug)"))
            forms.append((links[0], "http://127.0.0.1:8080/join/\(slug)"))
        }
        for (link, text) in forms {
            let characters = Array(text)
            var parsed = 0
            for length in 0...characters.count {
                let prefix = String(characters[..<length])
                do throws(DeepLinkError) {
                    let result = try DeepLinkRouter.parse(prefix)
                    #expect(result == link, "prefix of \(length) characters parsed to something else")
                    parsed += 1
                } catch {
                    #expect(!error.description.isEmpty)
                }
            }
            // Only the whole link (or, for web links, none but the whole) parses.
            #expect(parsed == 1, "\(text.prefix(40)): \(parsed) prefixes parsed")
        }
    }

    /// In the seed's order (token first) a cut inside the vault name or
    /// before the status still parses: what the canonical order (token last)
    /// avoids. Documented here so the difference is deliberate.
    @Test func aLinkInTheSeedsOrderCutAfterTheTokenStillParses() throws {
        let cut = "rally://nominee/invite?token=\(F.tokenText)&vault=Family%20pho"
        #expect(try DeepLinkRouter.parse(cut) == .nomineeInvite(try F.nominee("Family pho", .pending)))
    }

    // MARK: Seeded fuzzing

    /// Parses `text`: either a DeepLinkError with a short description, or a
    /// link that writes back to text parsing to the same link.
    static func check(_ text: String) -> DeepLink? {
        do throws(DeepLinkError) {
            let link = try DeepLinkRouter.parse(text)
            expectRoundTrip(link)
            return link
        } catch {
            #expect(error.description.count < 400, "\(error.description.prefix(80))")
            return nil
        }
    }

    @Test func randomBytesOnlyEverParseOrFailWithADeepLinkError() async {
        await offThePool {
            var random = SeededGenerator(seed: 0xDEE9_11CC)
            for _ in 0..<4000 {
                let count = Int.random(in: 0..<300, using: &random)
                _ = Self.check(String(decoding: random.bytes(count), as: UTF8.self))
            }
        }
    }

    @Test func randomLinkShapedTextOnlyEverParsesOrFails() {
        var random = SeededGenerator(seed: 0x11_4E5)
        let pieces = [
            "rally://", "RALLY://", "https://", "http://", "nominee", "/invite", "join", "/", "?", "&", "=", "#",
            "token", "vault", "status", "pending", "accepted", "declined", "%", "%2", "%41", "%C3", "%A9", "%0A",
            "%F0%9F%8E%89", " ", "é", "🎉", "\u{202E}", "\n", "\0", "+", ":", "rally.example", F.tokenText,
            String(F.tokenText.dropLast()), "AAAA", "x",
        ]
        func junk(_ random: inout SeededGenerator, _ most: Int) -> String {
            (0..<Int.random(in: 0...most, using: &random)).map { _ in pieces.randomElement(using: &random)! }
                .joined()
        }
        var parsed = 0
        for _ in 0..<6000 {
            var text: String
            if random.chance(60) {
                // Parameters that are mostly right, in any order, sometimes
                // repeated, missing or joined by junk.
                var parameters = [
                    "token=" + (random.chance(85) ? F.tokenText : junk(&random, 3)),
                    "vault=" + junk(&random, 6),
                    "status="
                        + (random.chance(70)
                            ? NomineeLinkStatus.allCases.randomElement(using: &random)!.rawValue : junk(&random, 2)),
                ]
                if random.chance(20) { parameters.append(junk(&random, 3)) }
                if random.chance(20) { parameters.removeLast() }
                parameters.shuffle(using: &random)
                text =
                    "rally://nominee/invite?" + parameters.joined(separator: random.chance(90) ? "&" : junk(&random, 1))
            } else {
                text = (random.chance(50) ? "rally://join/" : "") + junk(&random, 14)
            }
            if random.chance(10) { text += junk(&random, 2) }
            if Self.check(text) != nil { parsed += 1 }
        }
        #expect(parsed > 300, "\(parsed) parsed")
    }

    @Test func randomMutationsOfValidLinksOnlyEverParseOrFail() throws {
        var random = SeededGenerator(seed: 0x7A57_E1)
        let seeds = [
            try F.nominee("Family photos 🎉 & more", .accepted).url, F.seedOrder(vault: "My%20Vault"),
            "rally://join/\(try F.slug())", "https://rally.example/join#\(try F.slug())",
        ]
        let pool = Array("rally:/?&=#%+-_.~ABCaz09é🎉\u{0}\n\t\u{202E}")
        var outcomes = (parsed: 0, failed: 0)
        for _ in 0..<6000 {
            var characters = Array(seeds.randomElement(using: &random)!)
            for _ in 0..<Int.random(in: 1...3, using: &random) {
                guard !characters.isEmpty else { break }
                let at = Int.random(in: 0..<characters.count, using: &random)
                switch Int.random(in: 0..<5, using: &random) {
                case 0: characters.remove(at: at)
                case 1: characters.insert(pool.randomElement(using: &random)!, at: at)
                case 2: characters[at] = pool.randomElement(using: &random)!
                case 3: characters = Array(characters[..<at])
                default:
                    let end = min(characters.count, at + Int.random(in: 1...20, using: &random))
                    characters.insert(contentsOf: characters[at..<end], at: at)
                }
            }
            if Self.check(String(characters)) != nil { outcomes.parsed += 1 } else { outcomes.failed += 1 }
        }
        // Both outcomes occur: the mutations reach past the first check.
        #expect(outcomes.parsed > 50 && outcomes.failed > 50, "\(outcomes)")
    }
}

@Suite("NomineeToken")
struct NomineeTokenTests {
    @Test func randomTokensAreDistinct43CharacterBase64URL() throws {
        let alphabet = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        var seen = Set<NomineeToken>()
        for _ in 0..<1000 {
            let token = NomineeToken.random()
            #expect(token.bytes.count == 32)
            #expect(token.text.count == 43)
            #expect(token.text.allSatisfy { alphabet.contains($0) })
            #expect(try NomineeToken(text: token.text) == token)
            seen.insert(token)
        }
        #expect(seen.count == 1000)
    }

    @Test func seededTokensReplay() {
        var a = SeededGenerator(seed: 42)
        var b = SeededGenerator(seed: 42)
        #expect(NomineeToken.random(using: &a) == NomineeToken.random(using: &b))
        #expect(NomineeToken.random(using: &a) != NomineeToken.random())
    }

    @Test func knownBytesHaveKnownText() throws {
        #expect(DeepLinkFixtures.token.text == DeepLinkFixtures.tokenText)
        #expect(try NomineeToken(text: DeepLinkFixtures.tokenText).bytes == Data(0..<32))
        #expect(
            try NomineeToken(text: String(repeating: "_", count: 42) + "8").bytes == Data(repeating: 0xFF, count: 32))
    }

    @Test func invalidTextsAreRefused() {
        let valid = DeepLinkFixtures.tokenText
        let cases: [(String, DeepLinkError.TokenProblem)] = [
            ("", .length(characters: 0)),
            (String(valid.dropLast()), .length(characters: 42)),
            (valid + "A", .length(characters: 44)),
            (valid + "=", .length(characters: 44)),
            (String(valid.dropLast()) + "=", .alphabet),
            (String(valid.dropLast()) + "+", .alphabet),
            (String(valid.dropLast()) + "/", .alphabet),
            ("+" + String(valid.dropFirst()), .alphabet),
            (String(valid.dropLast()) + " ", .alphabet),
            (String(valid.dropLast()) + "é", .alphabet),
            (String(valid.dropLast(2)) + "é", .length(characters: 42)),
        ]
        for (text, problem) in cases {
            #expect(throws: DeepLinkError.invalidToken(problem), "\(text)") { try NomineeToken(text: text) }
        }
        #expect(throws: DeepLinkError.invalidToken(.byteCount(31))) { try NomineeToken(bytes: Data(count: 31)) }
        #expect(throws: DeepLinkError.invalidToken(.byteCount(33))) { try NomineeToken(bytes: Data(count: 33)) }
    }

    @Test func onlyTheCanonicalLastCharacterIsAccepted() {
        let stem = String(DeepLinkFixtures.tokenText.dropLast())
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        var accepted: [Character] = []
        for (value, last) in alphabet.enumerated() {
            do throws(DeepLinkError) {
                _ = try NomineeToken(text: stem + String(last))
                accepted.append(last)
                #expect(value % 4 == 0)
            } catch {
                #expect(error == .invalidToken(.nonCanonical))
            }
        }
        #expect(String(accepted) == "AEIMQUYcgkosw048")
    }

    @Test func printingATokenOrItsLinkNeverShowsTheToken() throws {
        let token = NomineeToken.random()
        let link = try NomineeInviteLink(token: token, vaultName: "Family", status: .pending)
        var dumped = ""
        dump(token, to: &dumped)
        dump(link, to: &dumped)
        let printed = [
            "\(token)", String(describing: token), String(reflecting: token), "\(link)", String(reflecting: link),
            "\(DeepLink.nomineeInvite(link))", String(reflecting: DeepLink.nomineeInvite(link)), "\([token])",
            "\(Optional(token) as Any)", dumped,
        ]
        for text in printed {
            #expect(!text.contains(token.text), "\(text)")
        }
        #expect("\(token)" == "NomineeToken(…)")
        #expect("\(link)" == "rally://nominee/invite?vault=Family&status=pending&token=…")
        #expect(link.url.contains(token.text))
    }

    @Test func theHashIsStableAndDomainSeparated() throws {
        let token = DeepLinkFixtures.token
        // SHA-256("rally-nominee-token-v1" ‖ bytes 0…31), and the plain SHA-256 of the bytes.
        #expect(token.hash.hexString == "938790f6e575a7bdb4bc2de7b8823661f6eccd6789823c1ef8c5bbf806c55dd8")
        #expect(token.hash.hexString != "630dcd2966c4336691125448bbb25b4ff412a49c732db2c8abc1b8581bd710dd")
        #expect(token.hash == token.hash)
        #expect(token.hash.count == 32)
        #expect(NomineeToken.random().hash != token.hash)
        #expect(!token.hash.base64URLEncoded().contains(token.text))
    }
}
