public import Foundation
public import RallyCrypto
public import RallyWire

/// Turns an envelope from the identity's inbox into a stored message, or
/// into a typed rejection. Pure apart from the clock value passed in.
public struct InboxProcessor: Sendable {
    public let identity: Identity
    public let codecs: CodecRegistry

    public init(identity: Identity, codecs: CodecRegistry = .standard) {
        self.identity = identity
        self.codecs = codecs
    }

    public func process(_ envelope: WireEnvelope, receivedAt: Date) -> Result<StoredMessage, InboxRejection> {
        processDecoded(envelope, receivedAt: receivedAt).map(\.message)
    }

    /// The stored message and the value its content decoded to (nil for
    /// an unknown or undecodable type), so nothing decodes it again: a
    /// welcome's content is the group's whole state.
    func processDecoded(
        _ envelope: WireEnvelope, receivedAt: Date
    ) -> Result<(message: StoredMessage, value: (any Sendable)?), InboxRejection> {
        let verified: VerifiedMessage
        do {
            verified = try MessageSealing.open(envelope.payload, as: identity)
        } catch {
            return .failure(InboxRejection(topic: envelope.topic, seq: envelope.seq, reason: error))
        }
        let content = verified.body.content
        let decoded = codecs.decode(content)
        let message = StoredMessage(
            id: verified.messageID.hexString,
            conversation: verified.sender.inboxID.rawValue,
            outgoing: false,
            sender: verified.sender.inboxID,
            senderName: verified.sender.displayName,
            sentAt: Date(milliseconds: verified.body.sentAtMs),
            receivedAt: receivedAt,
            topic: envelope.topic,
            seq: envelope.seq,
            contentType: decoded.contentType.description,
            encodedContent: FrameCodec.encode(codecs.keptContent(content, decodedAs: decoded.value)),
            displayText: decoded.displayText,
            isKnownType: decoded.isKnown)
        return .success((message, decoded.value))
    }
}

/// An envelope that was dropped: it could not be opened or verified.
/// Nothing of it is stored; the cursor moves past it.
public struct InboxRejection: Error, Sendable, Equatable, CustomStringConvertible {
    public let topic: String
    public let seq: UInt64
    public let reason: RallyCryptoError

    public var description: String { "dropped envelope #\(seq) on \(topic): \(reason)" }
}
