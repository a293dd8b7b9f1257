import Foundation
import Testing

@testable import RallyCore

@Suite("Call links: formatted and read back, hostile text refused with the reason")
struct CallLinkTests {
    let relay = URL(string: "https://relay.example:8443/rally")!
    let room = "0123456789abcdef0123456789abcdef"

    @Test("A fresh link reads back to the same relay, room and key; the key is only in the fragment")
    func roundTrip() throws {
        let link = CallLink.fresh(relayURL: relay, room: room)
        let text = link.description
        #expect(text.hasPrefix("https://relay.example:8443/rally/call/\(room)#"))
        #expect(link.url.fragment == link.secret.base64URLEncoded())
        #expect(try CallLink(parsing: text) == link)
        #expect(try CallLink(parsing: "  \(text)\n") == link)
        #expect(CallLink.fresh(relayURL: relay, room: room).secret != link.secret)
    }

    @Test("Truncated, oversized, malformed and hostile links each get their error")
    func hostile() {
        let key = Data(repeating: 7, count: 32).base64URLEncoded()
        let cases: [(String, CallLinkError)] = [
            ("", .notALink),
            ("call/\(room)#\(key)", .notALink),
            ("javascript:alert(1)//call/\(room)#\(key)", .notALink),
            ("ftp://relay.example/call/\(room)#\(key)", .notALink),
            ("https:///call/\(room)#\(key)", .notALink),
            ("https://relay.example/room/\(room)#\(key)", .notACallLink),
            ("https://relay.example/call/\(room.prefix(31))#\(key)", .badRoom),
            ("https://relay.example/call/\(room.uppercased())#\(key)", .badRoom),
            ("https://relay.example/call/\(room)/extra#\(key)", .badRoom),
            ("https://relay.example/call/\(room)", .missingKey),
            ("https://relay.example/call/\(room)#", .missingKey),
            ("https://relay.example/call/\(room)#\(key.dropLast(2))", .badKey),
            ("https://relay.example/call/\(room)#\(key)AAAA", .badKey),
            ("https://relay.example/call/\(room)#\(key.replacingOccurrences(of: "B", with: "+"))", .badKey),
            ("https://relay.example/call/\(room)#" + String(repeating: "A", count: 3000), .tooLong(limit: 2048)),
        ]
        for (text, expected) in cases {
            #expect(throws: expected, "\(text.prefix(80))") { try CallLink(parsing: text) }
        }
    }
}
