import Foundation
import RallyCrypto
import Testing

@Suite("HTTPAuthorization")
struct HTTPAuthorizationTests {
    let identity = Identity(displayName: "a")
    let now = Date(timeIntervalSince1970: 1_700_000_000)
    static let path = "/v1/topics/inbox/mzuhvlpymk6xo3epygfy5h4oeaejofef"
    static let origin = "https://relay.example"
    var path: String { Self.path }

    /// The binding the relay rebuilds for a request (time and nonce come
    /// from the header).
    func binding(
        method: String = "GET", path: String = path, query: String = "after=3", body: Data = Data(),
        origin: String = origin
    ) -> HTTPRequestBinding {
        HTTPRequestBinding(
            origin: origin, method: method, path: path, query: query, body: body, millis: 0, nonce: Data())
    }

    var signedBinding: HTTPRequestBinding {
        var fresh = HTTPRequestBinding.fresh(
            origin: Self.origin, method: "GET", path: path, query: "after=3", body: Data(), now: now)
        fresh.nonce = Data(repeating: 9, count: HTTPAuthorization.nonceByteCount)
        return fresh
    }

    var header: String { HTTPAuthorization.header(identity: identity, binding: signedBinding) }

    func verify(_ header: String, _ binding: HTTPRequestBinding? = nil, at offset: TimeInterval = 0) throws -> InboxID {
        try HTTPAuthorization.verify(
            header: header, binding: binding ?? self.binding(), now: now.addingTimeInterval(offset)
        )
        .inbox
    }

    @Test func aFreshHeaderVerifiesToTheSignersInbox() throws {
        #expect(header.hasPrefix("Rally "))
        #expect(try verify(header) == identity.inboxID)
        let verified = try HTTPAuthorization.verify(header: header, binding: binding(), now: now).verified
        #expect(verified.nonce == signedBinding.nonce)
        #expect(verified.millis == 1_700_000_000_000)
    }

    @Test func theMethodIsCaseInsensitive() throws {
        #expect(try verify(header, binding(method: "get")) == identity.inboxID)
    }

    @Test(
        "timestamps inside the window verify",
        arguments: [-HTTPAuthorization.window, -299.999, -1, 0, 1, 299.999, HTTPAuthorization.window])
    func insideWindow(offset: TimeInterval) throws {
        #expect(try verify(header, at: offset) == identity.inboxID)
    }

    @Test("a header for another request, body or relay fails")
    func otherRequests() {
        let others = [
            binding(path: "/v1/topics/inbox/other"), binding(path: path + "/"), binding(query: "after=4"),
            binding(query: ""), binding(method: "POST"), binding(body: Data([1])),
            binding(origin: "https://relay.example:8443"), binding(origin: "http://relay.example:80"),
        ]
        for other in others {
            #expect(throws: RallyCryptoError.invalidSignature("authorization header")) { try verify(header, other) }
        }
    }

    @Test func aTopicProofHeaderIsBoundTheSameWayAndNotAnAuthorization() throws {
        let access = try TopicAccess(secret: TopicAccess.newSecret())
        let proof = HTTPAuthorization.topicProofHeader(access: access, binding: signedBinding)
        #expect(
            try HTTPAuthorization.verifyTopicProof(header: proof, binding: binding(), now: now).key == access.publicKey)
        #expect(throws: RallyCryptoError.invalidSignature("topic proof header")) {
            try HTTPAuthorization.verifyTopicProof(header: proof, binding: binding(body: Data([1])), now: now)
        }
        // The identity's signature is in another domain.
        let asProof = String(header.dropFirst("Rally ".count))
        #expect(throws: RallyCryptoError.invalidSignature("topic proof header")) {
            try HTTPAuthorization.verifyTopicProof(header: asProof, binding: binding(), now: now)
        }
    }

    @Test(
        "timestamps outside the window are stale, in both directions",
        arguments: [-HTTPAuthorization.window - 0.001, -301, -86_400, 300.001, 301, 86_400, 1e9])
    func outsideWindow(offset: TimeInterval) {
        #expect(throws: RallyCryptoError.staleTimestamp) {
            try verify(header, at: offset)
        }
    }

    @Test func anotherIdentitysKeyWithThisSignatureFails() {
        let parts = header.dropFirst("Rally ".count).split(separator: ".")
        let otherKey = Identity(displayName: "b").signingKey.publicKey.rawRepresentation.base64URLEncoded()
        let forged = "Rally \(otherKey).\(parts[1]).\(parts[2]).\(parts[3])"
        #expect(throws: RallyCryptoError.invalidSignature("authorization header")) { try verify(forged) }
    }

    @Test func aShiftedTimestampBreaksTheSignature() {
        let parts = header.dropFirst("Rally ".count).split(separator: ".")
        let millis = Int64(parts[1])! + 1
        let shifted = "Rally \(parts[0]).\(millis).\(parts[2]).\(parts[3])"
        #expect(throws: RallyCryptoError.invalidSignature("authorization header")) { try verify(shifted) }
        let otherNonce = Data(repeating: 8, count: HTTPAuthorization.nonceByteCount).base64URLEncoded()
        let renonced = "Rally \(parts[0]).\(parts[1]).\(otherNonce).\(parts[3])"
        #expect(throws: RallyCryptoError.invalidSignature("authorization header")) { try verify(renonced) }
    }

    @Test func aKeyOfTheWrongSizeIsAnInvalidPublicKey() {
        let parts = header.dropFirst("Rally ".count).split(separator: ".")
        let shortKey = identity.signingKey.publicKey.rawRepresentation.prefix(31).base64URLEncoded()
        let header = "Rally \(shortKey).\(parts[1]).\(parts[2]).\(parts[3])"
        #expect(throws: RallyCryptoError.invalidPublicKey("authorization header key must be 32 bytes")) {
            try verify(header)
        }
    }

    @Test func anEmptyKeyIsAnInvalidPublicKey() {
        let parts = header.dropFirst("Rally ".count).split(separator: ".")
        #expect(throws: RallyCryptoError.invalidPublicKey("authorization header key must be 32 bytes")) {
            try verify("Rally .\(parts[1]).\(parts[2]).\(parts[3])")
        }
    }

    @Test func anEmptyOrTamperedSignatureFails() {
        let parts = header.dropFirst("Rally ".count).split(separator: ".")
        var signature = Data(base64URLEncoded: String(parts[3]))!
        signature[0] ^= 1
        for bad in ["", signature.base64URLEncoded(), Data(repeating: 0, count: 64).base64URLEncoded()] {
            #expect(throws: RallyCryptoError.invalidSignature("authorization header")) {
                try verify("Rally \(parts[0]).\(parts[1]).\(parts[2]).\(bad)")
            }
        }
    }

    struct MalformedCase: Sendable, CustomTestStringConvertible {
        let label: String
        let header: @Sendable (String, String, String) -> String  // (key, millis, nonce.signature)
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
        MalformedCase(label: "five parts") { k, m, s in "Rally \(k).\(m).\(s).x" },
        MalformedCase(label: "short nonce") { k, m, s in "Rally \(k).\(m).AAAA.\(s.split(separator: ".")[1])" },
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
        #expect(parts.count == 4)
        let bad = sample.header(parts[0], parts[1], parts[2] + "." + parts[3])
        #expect(throws: RallyCryptoError.malformed("authorization header")) { try verify(bad) }
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
