import Foundation
import RallyCore
import RallyCrypto
import RallyWire
import Testing

@Suite("InviteLink")
struct InviteLinkTests {
    static func slug() throws -> String { InviteSlug.encode(try InviteFixtures.signedInvite()) }

    @Test func acceptedForms() throws {
        let slug = try Self.slug()
        let accepted = [
            "rally://join/\(slug)",
            "https://rally.example/join#\(slug)",
            "https://rally.example:8443/join#\(slug)",
            "http://127.0.0.1:8080/join#\(slug)",
            "https://rally.example/join?utm_source=qr#\(slug)",
            "https://rally.example/join/\(slug)",
            "https://rally.example:443/join/\(slug)",
            "http://localhost:8080/join/\(slug)",
            "http://127.0.0.1:8080/join/\(slug)",
            "https://rally.example/join/\(slug)?utm_source=qr",
            "https://rally.example/join/\(slug)#top",
            slug,
        ]
        for text in accepted {
            #expect(try InviteLink.slug(from: text) == slug, "\(text.prefix(40))")
        }
    }

    @Test func surroundingWhitespaceIsIgnored() throws {
        let slug = try Self.slug()
        for text in [
            "  \(slug)  ", "\n\(slug)\n", "\t rally://join/\(slug)\r\n", "\n\nhttps://rally.example/join/\(slug) \n",
            "\u{00A0}\(slug)\u{2028}",
        ] {
            #expect(try InviteLink.slug(from: text) == slug)
        }
    }

    @Test func emptyTextIsEmpty() {
        for text in ["", " ", "\n\t\r\n  "] {
            #expect(throws: InviteError.empty) { try InviteLink.slug(from: text) }
        }
    }

    @Test func otherPathsSchemesAndSegmentsAreNotInviteLinks() throws {
        let slug = try Self.slug()
        let rejected = [
            "https://rally.example/invite/\(slug)",
            "https://rally.example/\(slug)",
            "https://rally.example/join",
            "https://rally.example/join/",
            "https://rally.example/join#",
            "https://rally.example/join/#\(slug)",
            "https://rally.example/joins#\(slug)",
            "https://rally.example/#\(slug)",
            "https://rally.example/join#\(slug)/extra",
            "https://rally.example/join/\(slug)/",
            "https://rally.example/join/\(slug)/extra",
            "https://rally.example/api/join/\(slug)",
            "http://localhost:8080/join/a/b",
            "rally://invite/\(slug)",
            "rally://\(slug)",
            "ftp://rally.example/join/\(slug)",
            "file:///join/\(slug)",
            "rallyx://join/\(slug)",
            "wss://rally.example/join/\(slug)",
            "join/\(slug)",
            "\(slug)/\(slug)",
        ]
        for text in rejected {
            #expect(throws: InviteError.notAnInviteLink(text), "\(text.prefix(60))") {
                try InviteLink.slug(from: text)
            }
        }
    }

    /// The app link must be held to the same rules as the web link: a
    /// `rally://join/` link with nothing after it, or with more segments,
    /// is not an invite link.
    @Test func appLinkWithEmptyOrExtraSegmentsIsNotAnInviteLink() throws {
        let slug = try Self.slug()
        for text in ["rally://join/", "rally://join/\(slug)/", "rally://join/\(slug)/extra", "rally://join//\(slug)"] {
            #expect(throws: InviteError.notAnInviteLink(text), "\(text.prefix(60))") {
                try InviteLink.slug(from: text)
            }
        }
    }

    @Test func overlongInputIsRefusedBeforeParsing() throws {
        let limit = InviteSlug.maxCharacters
        // Links have room for their prefix; past that the text is refused.
        let tooLong = String(repeating: "A", count: limit + 513)
        #expect(throws: InviteError.tooLong(characters: limit + 513, limit: limit)) {
            try InviteLink.slug(from: tooLong)
        }
        let longLink = "https://rally.example/join/" + String(repeating: "A", count: limit + 600)
        #expect(throws: InviteError.tooLong(characters: longLink.utf8.count, limit: limit)) {
            try InviteLink.slug(from: longLink)
        }
        // Whitespace does not count, but everything else does.
        let padded = "\n" + String(repeating: "A", count: limit + 512) + "   \n"
        #expect(try InviteLink.slug(from: padded).count == limit + 512)
        // ...and the slug itself is then held to its own limit.
        #expect(throws: InviteError.tooLong(characters: limit + 512, limit: limit)) {
            try Invite.parse(padded, now: InviteFixtures.now)
        }
    }

    @Test func linksForARelay() throws {
        let slug = try Self.slug()
        let cases: [(relay: String, origin: String)] = [
            ("wss://relay.rally.example:8443/v1/ws?token=x", "https://relay.rally.example:8443"),
            ("https://rally.example", "https://rally.example"),
            ("http://localhost:8080", "http://localhost:8080"),
            ("ws://127.0.0.1:9000/ws", "http://127.0.0.1:9000"),
        ]
        for (relay, origin) in cases {
            let url = try #require(URL(string: relay))
            let links = InviteLink.links(for: slug, relayURL: url)
            #expect(links.app == "rally://join/\(slug)")
            #expect(links.web == "\(origin)/join#\(slug)")
            #expect(try InviteLink.slug(from: links.app) == slug)
            #expect(try InviteLink.slug(from: links.web) == slug)
        }
    }

    /// `links` falls back to localhost when the relay URL has no host; an
    /// empty host must fall back too rather than give `https:///join/…`.
    @Test func linksForAHostlessRelayUseLocalhost() throws {
        let slug = try Self.slug()
        for (relay, origin) in [
            (URL(fileURLWithPath: "/tmp/relay"), "https://localhost"),
            (try #require(URL(string: "ws:///ws")), "http://localhost"),
        ] {
            let links = InviteLink.links(for: slug, relayURL: relay)
            #expect(links.web == "\(origin)/join#\(slug)", "\(relay)")
            #expect(links.app == "rally://join/\(slug)")
        }
    }

    @Test func linksParseBackToTheSameInvite() throws {
        let signed = try InviteFixtures.signedInvite()
        let slug = InviteSlug.encode(signed)
        let links = InviteLink.links(for: slug, relayURL: try #require(URL(string: "wss://relay.rally.example")))
        for text in [links.app, links.web, slug, "  \(links.web)\n"] {
            let invite = try Invite.parse(text, now: InviteFixtures.now)
            #expect(invite.signed == signed)
        }
    }
}
