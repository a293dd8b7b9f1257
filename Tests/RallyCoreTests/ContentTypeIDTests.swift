import Foundation
import RallyCore
import Testing

@Suite("ContentTypeID")
struct ContentTypeIDTests {
    @Test(
        "parse and describe round trip",
        arguments: [
            "xmtp.org/text:1.0", "example.com/reaction:12.345", "a/b:0.0", "a/b:4294967295.4294967295",
            "rally.chat/read-receipt:2.1",
        ])
    func roundTrip(_ text: String) throws {
        let id = try #require(ContentTypeID(parsing: text))
        #expect(id.description == text)
        #expect(ContentTypeID(parsing: id.description) == id)
        #expect(ContentTypeID(wire: id.wire) == id)
    }

    @Test func partsAreParsed() throws {
        let id = try #require(ContentTypeID(parsing: "example.com/reaction:12.345"))
        #expect(id == ContentTypeID(authority: "example.com", type: "reaction", major: 12, minor: 345))
        #expect(id.wire.authorityID == "example.com")
        #expect(id.wire.typeID == "reaction")
        #expect(id.wire.versionMajor == 12)
        #expect(id.wire.versionMinor == 345)
    }

    @Test(
        "malformed strings are rejected",
        arguments: [
            "", "xmtp.org", "xmtp.org/text", "xmtp.org/text:", "xmtp.org/text:1", "xmtp.org/text:1.",
            "xmtp.org/text:.0", "xmtp.org/text:1.0.0", "/text:1.0", "xmtp.org/:1.0", "text:1.0/xmtp.org",
            "xmtp.org:1.0", "xmtp.org/text:a.b", "xmtp.org/text:-1.0", "xmtp.org/text:1.-1",
            "xmtp.org/text:4294967296.0", "xmtp.org/text:0.4294967296", "xmtp.org/text: 1.0", "xmtp.org/text:1.0 ",
            "xmtp.org/text:1,0", "xmtp.org/text:0x1.0", "xmtp.org/text:١.٠",
        ])
    func rejects(_ text: String) {
        #expect(ContentTypeID(parsing: text) == nil)
    }

    /// A parsed id must describe back to the same text, so one type has one
    /// spelling; a signed number is not a version.
    @Test("signed version numbers are rejected", arguments: ["xmtp.org/text:+1.0", "xmtp.org/text:1.+0"])
    func signedVersions(_ text: String) {
        #expect(ContentTypeID(parsing: text) == nil, "parsed as \(ContentTypeID(parsing: text)?.description ?? "")")
    }

    @Test func readsMatchesAuthorityTypeAndMajorOnly() {
        let v1 = ContentTypeID(authority: "xmtp.org", type: "text", major: 1, minor: 0)
        #expect(v1.reads(ContentTypeID(authority: "xmtp.org", type: "text", major: 1, minor: 9)))
        #expect(v1.reads(v1))
        #expect(!v1.reads(ContentTypeID(authority: "xmtp.org", type: "text", major: 2, minor: 0)))
        #expect(!v1.reads(ContentTypeID(authority: "xmtp.org", type: "reply", major: 1, minor: 0)))
        #expect(!v1.reads(ContentTypeID(authority: "example.com", type: "text", major: 1, minor: 0)))
    }
}
