import Foundation
import RallyCrypto
import RallyWire
import Testing

/// SplitMix64: deterministic bytes so randomized tests replay exactly.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func bytes(_ count: Int) -> Data {
        Data((0..<count).map { _ in UInt8.random(in: .min ... .max, using: &self) })
    }
}

/// Runs a typed-throwing crypto operation and returns its outcome, so tests
/// can compare the exact error.
func outcome<T>(_ body: () throws(RallyCryptoError) -> T) -> Result<T, RallyCryptoError> {
    Result(catching: body)
}

extension Result {
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}

enum Fixtures {
    /// A text content as a RallyCore TextCodec would encode it.
    static func textContent(_ text: String) -> WireEncodedContent {
        var content = WireEncodedContent()
        content.type.authorityID = "xmtp.org"
        content.type.typeID = "text"
        content.type.versionMajor = 1
        content.parameters = ["encoding": "UTF-8"]
        content.content = Data(text.utf8)
        content.shouldPush = true
        return content
    }

    static func body(
        from sender: Identity, to recipient: String, text: String = "hello",
        messageID: Data = MessageSealing.newMessageID(), sentAtMs: Int64 = 1_700_000_000_000
    ) -> WireMessageBody {
        var body = WireMessageBody()
        body.messageID = messageID
        body.sender = sender.publicIdentity.wireBundle
        body.recipient = recipient
        body.sentAtMs = sentAtMs
        body.content = textContent(text)
        return body
    }

    /// A properly signed and sealed direct message from `sender` to `recipient`.
    static func sealed(from sender: Identity, to recipient: Identity, text: String = "hello") throws -> Data {
        let signed = MessageSealing.sign(body(from: sender, to: recipient.inboxID.rawValue, text: text), by: sender)
        return try MessageSealing.seal(signed, to: recipient.publicIdentity)
    }

    /// A date on a whole millisecond, so it survives the ms encoding exactly.
    static let created = Date(timeIntervalSince1970: 1_700_000_000.123)
}
