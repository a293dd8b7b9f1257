import Foundation
import Testing

@testable import RallyCrypto

@Suite("Base64url without padding, byte by byte")
struct Base64URLTests {
    /// The reference: Foundation's base64 with the URL alphabet swapped in
    /// and the padding dropped.
    static func reference(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    @Test("Every length from 0 to 300 bytes, random and all-ones, encodes as the reference does and decodes back")
    func roundTrips() {
        var generator = SystemRandomNumberGenerator()
        for count in 0...300 {
            for data in [
                Data((0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }),
                Data(repeating: 0xFF, count: count),
            ] {
                let text = data.base64URLEncoded()
                #expect(text == Self.reference(data), "\(count) bytes")
                #expect(Data(base64URLEncoded: text) == data, "\(count) bytes")
                // Characters not stored contiguously take the other path.
                #expect(Base64URL.decode(text.utf8.lazy.map { $0 }) == data, "\(count) bytes, lazily")
            }
        }
        #expect(Data([0xFB, 0xFF]).base64URLEncoded() == "-_8")
    }

    @Test("Padding, the standard alphabet's + and /, spaces, other bytes and impossible lengths are refused")
    func refusals() {
        for text in [
            "QQ==", "QQ=", "a+b/", "ab+c", "ab/c", "ab c", " abc", "abc\n", "ab\u{0}c", "aé", "A", "AAAAA", "-_-_-",
        ] {
            #expect(Data(base64URLEncoded: text) == nil, "\(text.debugDescription)")
            #expect(Base64URL.decode(text.utf8.lazy.map { $0 }) == nil, "\(text.debugDescription), lazily")
        }
        #expect(Data(base64URLEncoded: "") == Data())
        #expect(Data(base64URLEncoded: "-_8") == Data([0xFB, 0xFF]))
    }
}
