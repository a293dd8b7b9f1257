import Crypto
import Foundation
import Testing

@testable import RallyCrypto

@Suite("SignatureVerifier")
struct SignatureVerifierTests {
    static func signer(_ seed: UInt8) throws -> Curve25519.Signing.PrivateKey {
        try Curve25519.Signing.PrivateKey(rawRepresentation: Data(repeating: seed, count: 32))
    }

    @Test func aKeyGetsItsTableAtItsFourthSignatureAndEveryAnswerStaysRight() throws {
        let verifier = SignatureVerifier()
        let key = try Self.signer(1)
        for index in 1...6 {
            let message = Data("message \(index)".utf8)
            let signature = try key.signature(for: message)
            #expect(verifier.isValidSignature(signature, for: message, by: key.publicKey))
            #expect(!verifier.isValidSignature(signature, for: message + Data([0]), by: key.publicKey))
            // Each index verifies twice: the table comes at the fourth sighting.
            #expect(verifier.hasTable(for: key.publicKey) == (index >= 2), "after message \(index)")
        }
        #expect(verifier.counts.keys == 1 && verifier.counts.tables == 1)
    }

    @Test func keysAndTablesStayWithinTheirCapacitiesLeastRecentlyUsedFirst() throws {
        let verifier = SignatureVerifier(tableAfter: 1, keyCapacity: 3, tableCapacity: 2)
        let keys = try (1...4).map { try Self.signer(UInt8($0)) }
        let message = Data("m".utf8)
        for key in keys.prefix(3) {
            #expect(verifier.isValidSignature(try key.signature(for: message), for: message, by: key.publicKey))
        }
        // Three keys counted, two tables: the first key's was dropped for the third's.
        #expect(verifier.counts.keys == 3 && verifier.counts.tables == 2)
        #expect(!verifier.hasTable(for: keys[0].publicKey))
        #expect(verifier.hasTable(for: keys[2].publicKey))
        // A fourth key pushes out the least recently used key (the first).
        #expect(verifier.isValidSignature(try keys[3].signature(for: message), for: message, by: keys[3].publicKey))
        #expect(verifier.counts.keys == 3 && verifier.counts.tables == 2)
        #expect(verifier.hasTable(for: keys[3].publicKey))
    }

    @Test func aKeyThatIsNotACurvePointVerifiesNothingAndKeepsNoTable() throws {
        let verifier = SignatureVerifier(tableAfter: 1)
        // About half of all y values are no curve point's; take the first small one.
        let notAPoint = (2...40).lazy.map { y -> Data in
            var bytes = Data(count: 32)
            bytes[0] = UInt8(y)
            return bytes
        }.first { Ed25519KeyTable(publicKey: $0) == nil }
        let key = try Curve25519.Signing.PublicKey(rawRepresentation: try #require(notAPoint))
        #expect(!key.isValidSignature(Data(count: 64), for: Data()))
        #expect(!verifier.isValidSignature(Data(count: 64), for: Data(), by: key))
        #expect(!verifier.hasTable(for: key))
    }

    @Test func manyTasksVerifyingAtOnceGetTheRightAnswers() async throws {
        let verifier = SignatureVerifier(tableAfter: 2, keyCapacity: 4, tableCapacity: 2)
        let keys = try (1...6).map { try Self.signer(UInt8($0)) }
        let cases = try (0..<120).map { index in
            let key = keys[index % keys.count]
            let message = Data("message \(index)".utf8)
            return (key.publicKey, message, try key.signature(for: message), index % 3 != 0)
        }
        let wrong = await withTaskGroup(of: Int.self) { group in
            for (key, message, signature, genuine) in cases {
                group.addTask {
                    let signed = genuine ? message : message + Data([1])
                    return verifier.isValidSignature(signature, for: signed, by: key) == genuine ? 0 : 1
                }
            }
            return await group.reduce(0, +)
        }
        #expect(wrong == 0)
        #expect(verifier.counts.keys <= 4 && verifier.counts.tables <= 2)
    }
}
