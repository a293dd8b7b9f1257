import Foundation
import RallyCrypto
import Testing

@Suite("InboxID")
struct InboxIDTests {
    /// Computed independently: base32(SHA-256(key)[0..<20]), lowercase.
    @Test(
        "known derivations",
        arguments: [
            (Data(repeating: 0, count: 32), "mzuhvlpymk6xo3epygfy5h4oeaejofef"),
            (Data((0..<32).map { UInt8($0) }), "mmg42klgyqzwneiskrelxms3j72bfje4"),
        ])
    func knownVectors(key: Data, expected: String) {
        #expect(InboxID(signingPublicKey: key).rawValue == expected)
    }

    @Test func derivationIsDeterministicAnd32Characters() {
        let identity = Identity(displayName: "a")
        let key = identity.signingKey.publicKey.rawRepresentation
        let first = InboxID(signingPublicKey: key)
        #expect(first == InboxID(signingPublicKey: key))
        #expect(first == identity.inboxID)
        #expect(first == identity.publicIdentity.inboxID)
        #expect(first.rawValue.utf8.count == InboxID.textLength)
        #expect(first.description == first.rawValue)
        #expect(first.rawValue.allSatisfy { "abcdefghijklmnopqrstuvwxyz234567".contains($0) })
    }

    @Test func differentKeysGiveDifferentIDs() {
        let ids = Set((0..<50).map { _ in Identity(displayName: "x").inboxID })
        #expect(ids.count == 50)
    }

    @Test func validatingAcceptsADerivedID() throws {
        let id = Identity(displayName: "a").inboxID
        #expect(try InboxID(validating: id.rawValue) == id)
    }

    @Test(
        "validating trims whitespace and lowercases",
        arguments: [
            " mzuhvlpymk6xo3epygfy5h4oeaejofef", "mzuhvlpymk6xo3epygfy5h4oeaejofef\n",
            "\t mzuhvlpymk6xo3epygfy5h4oeaejofef \r\n", "MZUHVLPYMK6XO3EPYGFY5H4OEAEJOFEF",
            " MzuhvlpymK6XO3epygfy5h4oeaejofef ",
        ])
    func normalizes(_ text: String) throws {
        let id = try InboxID(validating: text)
        #expect(id.rawValue == "mzuhvlpymk6xo3epygfy5h4oeaejofef")
        #expect(id == InboxID(signingPublicKey: Data(repeating: 0, count: 32)))
    }

    static let valid = "mzuhvlpymk6xo3epygfy5h4oeaejofef"

    @Test(
        "validating rejects",
        arguments: [
            "", " ", String(valid.dropLast()), valid + "a", String(valid.dropLast()) + "0",
            String(valid.dropLast()) + "1", String(valid.dropLast()) + "8", String(valid.dropLast()) + "=",
            "mzuhvlpymk6xo3ep ygfy5h4oeaejofef", "mzuhvlpymk6xo3ep-gfy5h4oeaejofef",
            "mzuhvlpymk6xo3epygfy5h4oeaejofeé", "inbox/mzuhvlpymk6xo3epygfy5h4oea",
            String(repeating: "a", count: 1_000),
        ])
    func rejects(_ text: String) {
        #expect(throws: RallyCryptoError.invalidInboxID(text)) { try InboxID(validating: text) }
    }

    @Test func codableRoundTripAndRejectsInvalidText() throws {
        let id = Identity(displayName: "a").inboxID
        let json = try JSONEncoder().encode([id])
        #expect(String(decoding: json, as: UTF8.self) == "[\"\(id.rawValue)\"]")
        #expect(try JSONDecoder().decode([InboxID].self, from: json) == [id])
        let bad = Data("[\"not-an-inbox\"]".utf8)
        #expect(throws: RallyCryptoError.invalidInboxID("not-an-inbox")) {
            try JSONDecoder().decode([InboxID].self, from: bad)
        }
    }

    @Test func orderingFollowsTheText() throws {
        let a = try InboxID(validating: String(repeating: "a", count: 32))
        let b = try InboxID(validating: String(repeating: "b", count: 32))
        #expect(a < b)
        #expect(!(b < a))
        #expect([b, a].sorted() == [a, b])
    }
}
