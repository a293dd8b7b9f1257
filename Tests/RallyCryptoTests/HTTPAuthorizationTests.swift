import Foundation
import RallyCrypto
import Testing

@Suite("HTTPAuthorization")
struct HTTPAuthorizationTests {
    let identity = Identity(displayName: "a")
    let now = Date(timeIntervalSince1970: 1_700_000_000)
    static let path = "/v1/topics/inbox/mzuhvlpymk6xo3epygfy5h4oeaejofef"
    var path: String { Self.path }

    var header: String { HTTPAuthorization.header(identity: identity, method: "GET", path: path, now: now) }

    @Test func aFreshHeaderVerifiesToTheSignersInbox() throws {
        #expect(header.hasPrefix("Rally "))
        #expect(try HTTPAuthorization.verify(header: header, method: "GET", path: path, now: now) == identity.inboxID)
    }

    @Test func theMethodIsCaseInsensitive() throws {
        let lower = HTTPAuthorization.header(identity: identity, method: "get", path: path, now: now)
        #expect(try HTTPAuthorization.verify(header: lower, method: "GET", path: path, now: now) == identity.inboxID)
        #expect(try HTTPAuthorization.verify(header: header, method: "get", path: path, now: now) == identity.inboxID)
    }

    @Test(
        "timestamps inside the window verify",
        arguments: [-HTTPAuthorization.window, -299.999, -1, 0, 1, 299.999, HTTPAuthorization.window])
    func insideWindow(offset: TimeInterval) throws {
        let verified = try HTTPAuthorization.verify(
            header: header, method: "GET", path: path, now: now.addingTimeInterval(offset))
        #expect(verified == identity.inboxID)
    }

    @Test(
        "timestamps outside the window are stale, in both directions",
        arguments: [-HTTPAuthorization.window - 0.001, -301, -86_400, 300.001, 301, 86_400, 1e9])
    func outsideWindow(offset: TimeInterval) {
        #expect(throws: RallyCryptoError.staleTimestamp) {
            try HTTPAuthorization.verify(header: header, method: "GET", path: path, now: now.addingTimeInterval(offset))
        }
    }

    @Test(
        "a header for another path fails",
        arguments: ["/v1/topics/inbox/other", "/v1/topics", "", path + "/", path + "?after=1", path.uppercased()])
    func wrongPath(_ other: String) {
        #expect(throws: RallyCryptoError.invalidSignature("authorization header")) {
            try HTTPAuthorization.verify(header: header, method: "GET", path: other, now: now)
        }
    }

    @Test("a header for another method fails", arguments: ["POST", "PUT", "DELETE", "HEAD", ""])
    func wrongMethod(_ method: String) {
        #expect(throws: RallyCryptoError.invalidSignature("authorization header")) {
            try HTTPAuthorization.verify(header: header, method: method, path: path, now: now)
        }
    }

    @Test func anotherIdentitysKeyWithThisSignatureFails() {
        let parts = header.dropFirst("Rally ".count).split(separator: ".")
        let otherKey = Identity(displayName: "b").signingKey.publicKey.rawRepresentation.base64URLEncoded()
        let forged = "Rally \(otherKey).\(parts[1]).\(parts[2])"
        #expect(throws: RallyCryptoError.invalidSignature("authorization header")) {
            try HTTPAuthorization.verify(header: forged, method: "GET", path: path, now: now)
        }
    }

    @Test func aShiftedTimestampBreaksTheSignature() {
        let parts = header.dropFirst("Rally ".count).split(separator: ".")
        let millis = Int64(parts[1])! + 1
        let shifted = "Rally \(parts[0]).\(millis).\(parts[2])"
        #expect(throws: RallyCryptoError.invalidSignature("authorization header")) {
            try HTTPAuthorization.verify(header: shifted, method: "GET", path: path, now: now)
        }
    }

    @Test func aKeyOfTheWrongSizeIsAnInvalidPublicKey() {
        let parts = header.dropFirst("Rally ".count).split(separator: ".")
        let shortKey = identity.signingKey.publicKey.rawRepresentation.prefix(31).base64URLEncoded()
        let header = "Rally \(shortKey).\(parts[1]).\(parts[2])"
        #expect(throws: RallyCryptoError.invalidPublicKey("authorization key must be 32 bytes")) {
            try HTTPAuthorization.verify(header: header, method: "GET", path: path, now: now)
        }
    }

    @Test func anEmptyKeyIsAnInvalidPublicKey() {
        let parts = header.dropFirst("Rally ".count).split(separator: ".")
        #expect(throws: RallyCryptoError.invalidPublicKey("authorization key must be 32 bytes")) {
            try HTTPAuthorization.verify(header: "Rally .\(parts[1]).\(parts[2])", method: "GET", path: path, now: now)
        }
    }

    @Test func anEmptyOrTamperedSignatureFails() {
        let parts = header.dropFirst("Rally ".count).split(separator: ".")
        var signature = Data(base64URLEncoded: String(parts[2]))!
        signature[0] ^= 1
        for bad in ["", signature.base64URLEncoded(), Data(repeating: 0, count: 64).base64URLEncoded()] {
            #expect(throws: RallyCryptoError.invalidSignature("authorization header")) {
                try HTTPAuthorization.verify(
                    header: "Rally \(parts[0]).\(parts[1]).\(bad)", method: "GET", path: path, now: now)
            }
        }
    }

    struct MalformedCase: Sendable, CustomTestStringConvertible {
        let label: String
        let header: @Sendable (String, String, String) -> String  // (key, millis, signature)
        var testDescription: String { label }
    }

    static let malformedCases: [MalformedCase] = [
        MalformedCase(label: "empty") { _, _, _ in "" },
        MalformedCase(label: "scheme only") { _, _, _ in "Rally" },
        MalformedCase(label: "scheme and space") { _, _, _ in "Rally " },
        MalformedCase(label: "other scheme") { k, m, s in "Bearer \(k).\(m).\(s)" },
        MalformedCase(label: "lowercase scheme") { k, m, s in "rally \(k).\(m).\(s)" },
        MalformedCase(label: "no space after scheme") { k, m, s in "Rally\(k).\(m).\(s)" },
        MalformedCase(label: "double space") { k, m, s in "Rally  \(k).\(m).\(s)" },
        MalformedCase(label: "two parts") { k, m, _ in "Rally \(k).\(m)" },
        MalformedCase(label: "four parts") { k, m, s in "Rally \(k).\(m).\(s).x" },
        MalformedCase(label: "empty timestamp") { k, _, s in "Rally \(k)..\(s)" },
        MalformedCase(label: "timestamp not a number") { k, _, s in "Rally \(k).soon.\(s)" },
        MalformedCase(label: "timestamp with fraction") { k, m, s in "Rally \(k).\(m),5.\(s)" },
        MalformedCase(label: "timestamp overflows Int64") { k, _, s in "Rally \(k).99999999999999999999.\(s)" },
        MalformedCase(label: "padded key") { k, m, s in "Rally \(k)=.\(m).\(s)" },
        MalformedCase(label: "standard base64 key") { k, m, s in
            "Rally \(k.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/"))+.\(m).\(s)"
        },
        MalformedCase(label: "key with impossible length") { k, m, s in "Rally \(k)AA.\(m).\(s)" },
        MalformedCase(label: "signature with bad character") { k, m, s in "Rally \(k).\(m).\(s)!" },
        MalformedCase(label: "oversized") { k, m, s in "Rally \(k).\(m).\(s)" + String(repeating: "A", count: 512) },
    ]

    @Test("malformed headers", arguments: malformedCases)
    func malformed(_ sample: MalformedCase) {
        let parts = header.dropFirst("Rally ".count).split(separator: ".").map(String.init)
        #expect(parts.count == 3)
        let bad = sample.header(parts[0], parts[1], parts[2])
        #expect(throws: RallyCryptoError.malformed("authorization header")) {
            try HTTPAuthorization.verify(header: bad, method: "GET", path: path, now: now)
        }
    }

    @Test func base64URLRoundTripsAllLengths() {
        var generator = SeededGenerator(seed: 64)
        for length in 0...70 {
            let bytes = generator.bytes(length)
            let text = bytes.base64URLEncoded()
            #expect(!text.contains("=") && !text.contains("+") && !text.contains("/"))
            #expect(Data(base64URLEncoded: text) == bytes)
        }
        #expect(Data(base64URLEncoded: "A") == nil)
        #expect(Data(base64URLEncoded: "AA==") == nil)
        #expect(Data(base64URLEncoded: "a+b/") == nil)
    }
}
