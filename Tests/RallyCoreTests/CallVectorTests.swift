import Foundation
import RallyCore
import RallyCrypto
import RallyTestSupport
import Testing

// MARK: The shared vector files

/// The language-neutral vector files in Spec/ that the browser's tests
/// (Tests/Browser/) replay too (each file's `format` field describes it).
enum CallSpecFile {
    static func url(_ name: String) -> URL {
        packageRoot().appendingPathComponent("Spec").appendingPathComponent(name)
    }

    static func data(_ name: String) throws -> Data { try Data(contentsOf: url(name)) }

    /// The file's top level and its vectors as untyped JSON, to check their keys.
    static func keys(_ name: String) throws -> (root: Set<String>, vectors: [[String: Any]]) {
        let root = try #require(try JSONSerialization.jsonObject(with: data(name)) as? [String: Any])
        return (Set(root.keys), try #require(root["vectors"] as? [[String: Any]]))
    }
}

/// `Spec/call-ladder.vectors.json`.
struct CallLadderVectorFile: Decodable, Sendable {
    static let name = "call-ladder.vectors.json"

    var description: String
    var format: String
    var constants: Constants
    var vectors: [CallLadderVector]

    struct Constants: Decodable, Sendable {
        var baseMs: Int64
        var capMs: Int64
        var rungs: [String]

        enum CodingKeys: String, CodingKey {
            case baseMs = "base_ms"
            case capMs = "cap_ms"
            case rungs
        }
    }

    static func load() throws -> CallLadderVectorFile {
        try JSONDecoder().decode(CallLadderVectorFile.self, from: CallSpecFile.data(name))
    }
}

struct CallLadderVector: Decodable, Sendable, CustomTestStringConvertible {
    var name: String
    var note: String?
    var steps: [Step]

    var testDescription: String { name }

    /// `{"op": "next", "unit": u, "expect": {…}}` or `{"op": "recovered"}`;
    /// other ops fail decoding.
    enum Step: Decodable, Sendable {
        case next(unit: Double, expect: Expectation)
        case recovered

        private enum Keys: String, CodingKey {
            case op, unit, expect
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: Keys.self)
            switch try container.decode(String.self, forKey: .op) {
            case "next":
                self = .next(
                    unit: try container.decode(Double.self, forKey: .unit),
                    expect: try container.decode(Expectation.self, forKey: .expect))
            case "recovered":
                self = .recovered
            case let op:
                throw DecodingError.dataCorruptedError(
                    forKey: .op, in: container, debugDescription: "unknown op \(op)")
            }
        }

        var expectation: Expectation? {
            guard case .next(_, let expect) = self else { return nil }
            return expect
        }
    }

    struct Expectation: Decodable, Sendable {
        var attempt: Int
        /// Unknown rung names fail decoding.
        var rung: CallRecoveryRung
        var delayMs: Double

        enum CodingKeys: String, CodingKey {
            case attempt, rung
            case delayMs = "delay_ms"
        }
    }
}

/// `Spec/call-signal.vectors.json`: sealing vectors (with nonce and
/// plaintext) and negative ones (with `opens: false`).
struct CallSignalVectorFile: Decodable, Sendable {
    static let name = "call-signal.vectors.json"

    var description: String
    var format: String
    var vectors: [CallSignalVector]

    var sealing: [CallSignalVector] { vectors.filter { $0.opens == nil } }
    var negative: [CallSignalVector] { vectors.filter { $0.opens != nil } }

    static func load() throws -> CallSignalVectorFile {
        try JSONDecoder().decode(CallSignalVectorFile.self, from: CallSpecFile.data(name))
    }
}

struct CallSignalVector: Decodable, Sendable, CustomTestStringConvertible {
    var name: String
    var secret: String
    var room: String
    var nonce: String?
    var plaintext: String?
    var sealed: String
    var opens: Bool?

    var testDescription: String { name }

    /// 32 lowercase hex digits, as the relay names rooms.
    var roomIsWellFormed: Bool {
        room.count == 32 && room.allSatisfy { "0123456789abcdef".contains($0) }
    }
}

// MARK: Replaying the vectors

@Suite("Call vectors")
struct CallVectorTests {
    /// A duration in milliseconds; Double so a delay built through Double
    /// arithmetic compares within a tolerance rather than to the attosecond.
    private static func milliseconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) * 1_000 + Double(attoseconds) / 1e15
    }

    // MARK: The call ladder

    @Test("Each call-ladder vector replays exactly", arguments: try CallLadderVectorFile.load().vectors)
    func ladderVector(_ vector: CallLadderVector) {
        var ladder = CallLadder(backoff: .standard)
        for (index, step) in vector.steps.enumerated() {
            switch step {
            case .recovered:
                ladder.recovered()
            case .next(let unit, let expect):
                let result = ladder.next(unit: unit)
                #expect(result.attempt == expect.attempt, "step \(index) (unit \(unit))")
                #expect(result.rung == expect.rung, "step \(index) (unit \(unit))")
                #expect(
                    abs(Self.milliseconds(result.delay) - expect.delayMs) <= 1e-6,
                    "step \(index) (unit \(unit)): \(result.delay), expected \(expect.delayMs) ms")
            }
        }
    }

    @Test("The call-ladder file decodes, is well formed and its constants are CallLadder's")
    func ladderFile() throws {
        let file = try CallLadderVectorFile.load()
        #expect(!file.vectors.isEmpty)
        #expect(!file.description.isEmpty && !file.format.isEmpty)
        #expect(Set(file.vectors.map(\.name)).count == file.vectors.count, "vector names are unique")
        for vector in file.vectors {
            #expect(!vector.steps.isEmpty, "\(vector.name) has no steps")
            for expect in vector.steps.compactMap(\.expectation) {
                // Whole milliseconds, so every implementation can compare exactly.
                #expect(expect.delayMs == expect.delayMs.rounded(), "\(vector.name): \(expect.delayMs) ms")
            }
        }
        #expect(Backoff.standard.base == .milliseconds(file.constants.baseMs))
        #expect(Backoff.standard.cap == .milliseconds(file.constants.capMs))
        #expect(file.constants.rungs == CallRecoveryRung.allCases.map(\.rawValue))
        #expect(CallLadder(backoff: .standard).rungs == CallRecoveryRung.allCases)
    }

    @Test("Keys outside the call-ladder format fail the check, so a typo cannot silently drop an expectation")
    func ladderKeys() throws {
        let (root, vectors) = try CallSpecFile.keys(CallLadderVectorFile.name)
        #expect(root == ["description", "format", "constants", "vectors"])
        for vector in vectors {
            #expect(Set(vector.keys).isSubset(of: ["name", "note", "steps"]), "\(vector.keys)")
            for step in try #require(vector["steps"] as? [[String: Any]]) {
                if step["op"] as? String == "recovered" {
                    #expect(Set(step.keys) == ["op"], "\(step.keys)")
                } else {
                    #expect(Set(step.keys) == ["op", "unit", "expect"], "\(step.keys)")
                    let expect = try #require(step["expect"] as? [String: Any])
                    #expect(Set(expect.keys) == ["attempt", "rung", "delay_ms"], "\(expect.keys)")
                }
            }
        }
    }

    @Test("Unknown ops and rungs fail decoding")
    func ladderDecoderRejectsUnknownNames() {
        func decode(_ step: String) throws {
            let json = #"{"name": "n", "steps": [\#(step)]}"#
            _ = try JSONDecoder().decode(CallLadderVector.self, from: Data(json.utf8))
        }
        #expect(throws: Never.self) {
            try decode(#"{"op": "next", "unit": 1, "expect": {"attempt": 1, "rung": "rejoin", "delay_ms": 200}}"#)
        }
        #expect(throws: Never.self) { try decode(#"{"op": "recovered"}"#) }
        #expect(throws: DecodingError.self) { try decode(#"{"op": "reset"}"#) }
        #expect(throws: DecodingError.self) {
            try decode(#"{"op": "next", "unit": 1, "expect": {"attempt": 1, "rung": "ping", "delay_ms": 200}}"#)
        }
    }

    // MARK: The signal seal

    @Test(
        "Each call-signal vector seals to its bytes and opens to its text",
        arguments: try CallSignalVectorFile.load().sealing)
    func sealVector(_ vector: CallSignalVector) throws {
        let secret = try #require(Data(base64URLEncoded: vector.secret))
        let nonce = try #require(vector.nonce.flatMap { Data(base64URLEncoded: $0) })
        let plaintext = try #require(vector.plaintext)
        // CallSignalSeal replaces a nonce of another size with a random one.
        try #require(secret.count == 32 && nonce.count == 12)
        let sealer = CallSignalSeal(secret: secret, room: vector.room)
        #expect(sealer.seal(text: plaintext, nonce: nonce) == vector.sealed)
        let opened = sealer.open(text: vector.sealed)
        // Byte for byte: String's == treats canonically equivalent texts as equal.
        #expect(opened.map { Array($0.utf8) } == Array(plaintext.utf8))
    }

    @Test("No negative call-signal vector opens", arguments: try CallSignalVectorFile.load().negative)
    func negativeVector(_ vector: CallSignalVector) throws {
        let secret = try #require(Data(base64URLEncoded: vector.secret))
        try #require(secret.count == 32)
        #expect(CallSignalSeal(secret: secret, room: vector.room).open(text: vector.sealed) == nil)
    }

    @Test("The call-signal file decodes and is well formed")
    func signalFile() throws {
        let file = try CallSignalVectorFile.load()
        #expect(!file.sealing.isEmpty && !file.negative.isEmpty)
        #expect(!file.description.isEmpty && !file.format.isEmpty)
        #expect(Set(file.vectors.map(\.name)).count == file.vectors.count, "vector names are unique")
        for vector in file.vectors {
            #expect(Data(base64URLEncoded: vector.secret)?.count == 32, "\(vector.name): secret")
            #expect(vector.roomIsWellFormed, "\(vector.name): room \(vector.room)")
        }
        for vector in file.sealing {
            #expect(vector.nonce.flatMap { Data(base64URLEncoded: $0) }?.count == 12, "\(vector.name): nonce")
            #expect(vector.plaintext != nil, "\(vector.name): plaintext")
        }
        for vector in file.negative {
            #expect(vector.opens == false, "\(vector.name): opens")
            #expect(vector.nonce == nil && vector.plaintext == nil, "\(vector.name): a negative vector seals nothing")
        }
        let plaintexts = file.sealing.compactMap(\.plaintext)
        #expect(plaintexts.contains(""), "an empty plaintext")
        #expect(plaintexts.contains { !$0.allSatisfy(\.isASCII) }, "a non-ASCII plaintext")
    }

    @Test("Keys outside the call-signal format fail the check")
    func signalKeys() throws {
        let (root, vectors) = try CallSpecFile.keys(CallSignalVectorFile.name)
        #expect(root == ["description", "format", "vectors"])
        for vector in vectors {
            let keys = Set(vector.keys)
            #expect(
                keys == ["name", "secret", "room", "nonce", "plaintext", "sealed"]
                    || keys == ["name", "secret", "room", "sealed", "opens"],
                "\(keys)")
        }
    }
}
