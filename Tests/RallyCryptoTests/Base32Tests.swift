import Foundation
import RallyCrypto
import Testing

@Suite("Base32")
struct Base32Tests {
    /// RFC 4648, section 10, lowercased and without padding.
    static let vectors: [(String, String)] = [
        ("", ""), ("f", "my"), ("fo", "mzxq"), ("foo", "mzxw6"), ("foob", "mzxw6yq"), ("fooba", "mzxw6ytb"),
        ("foobar", "mzxw6ytboi"),
    ]

    @Test("RFC 4648 test vectors", arguments: vectors)
    func rfcVectors(plain: String, encoded: String) {
        #expect(Base32.encode(Data(plain.utf8)) == encoded)
        #expect(Base32.decode(encoded) == Data(plain.utf8))
    }

    @Test func randomBytesOfEveryLengthUpTo64RoundTrip() {
        var generator = SeededGenerator(seed: 32)
        for length in 0...64 {
            for _ in 0..<20 {
                let bytes = generator.bytes(length)
                let text = Base32.encode(bytes)
                #expect(text.utf8.count == (length * 8 + 4) / 5, "length \(length)")
                #expect(text.utf8.allSatisfy { Self.alphabet.contains($0) })
                #expect(Base32.decode(text) == bytes, "length \(length)")
            }
        }
    }

    @Test func allByteValuesRoundTrip() {
        let bytes = Data((0...255).map { UInt8($0) })
        #expect(Base32.decode(Base32.encode(bytes)) == bytes)
    }

    @Test(
        "characters outside the alphabet are rejected",
        arguments: ["MY", "mY", "m0", "m1", "m8", "m9", "my=", "my======", "m y", " my", "my\n", "m-", "mé", "m\u{0}"])
    func invalidCharacters(_ text: String) {
        #expect(Base32.decode(text) == nil)
    }

    /// "my" is the only spelling of "f" (0x66): the last character carries
    /// two padding bits that must be zero.
    @Test("non-zero trailing bits are rejected", arguments: ["mz", "m7", "mzxr", "mzxw7", "mzxw6yr", "mzxw6ytboj"])
    func nonCanonicalTrailingBits(_ text: String) {
        #expect(Base32.decode(text) == nil)
    }

    /// Lengths 1, 3 and 6 (mod 8) hold five or more leftover bits, which no
    /// encoding ever produces: "a" would be a second spelling of the empty
    /// string, "aaa" a second spelling of [0] (canonically "aa").
    @Test("impossible lengths are rejected", arguments: ["a", "aaa", "aaaaaa", "aaaaaaaaa", "mzxw6ytba"])
    func impossibleLengths(_ text: String) {
        #expect(Base32.decode(text) == nil, "\(text) decoded to \(Base32.decode(text).map { Array($0) } ?? [])")
    }

    /// The promise in the doc comment: each byte string has one spelling,
    /// so anything that decodes must re-encode to the same text.
    @Test func everyDecodableStringIsCanonical() {
        var generator = SeededGenerator(seed: 0xBA5E)
        let alphabet = Array(Self.alphabet)
        var decoded = 0
        var nonCanonical = [String]()
        for _ in 0..<3_000 {
            let length = Int.random(in: 0...16, using: &generator)
            let text = String(
                decoding: (0..<length).map { _ in alphabet.randomElement(using: &generator)! }, as: UTF8.self)
            guard let bytes = Base32.decode(text) else { continue }
            decoded += 1
            if Base32.encode(bytes) != text { nonCanonical.append(text) }
        }
        #expect(decoded > 0)
        #expect(
            nonCanonical.isEmpty,
            "\(nonCanonical.count) non-canonical spellings decoded, e.g. \(nonCanonical.prefix(5))")
    }

    static let alphabet = Set("abcdefghijklmnopqrstuvwxyz234567".utf8)
}

@Suite("Hex")
struct HexTests {
    @Test func everyByteIsItsTwoLowercaseDigitsInOrder() {
        let all = Data(0...255)
        let text = Hex.encode(all)
        #expect(text.count == 512)
        #expect(text.hasPrefix("000102") && text.hasSuffix("fdfeff"))
        #expect(text == all.map { String(format: "%02x", $0) }.joined())
        #expect(Hex.encode(Data()) == "")
    }
}
