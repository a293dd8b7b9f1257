import Foundation

/// The relay's most frequent client frame, a `ClientFrame` holding a
/// `Publish`, decoded by hand from the shape every encoder writes: each
/// field once, in field-number order, with its declared wire type, its tag
/// in one byte (every field number here is below 16) and no unknown fields.
/// The payload is a slice of the frame's `Data`, not a copy as SwiftProtobuf
/// made. The small fields (idempotency key, access keys, signature) are
/// copied, as before: caches and the store's index keep them for long, and a
/// slice would keep the whole frame with them.
///
/// Anything else, including every malformed frame, is left to SwiftProtobuf
/// (`nil` here), which decodes it or says why not; so what this accepts it
/// decodes to exactly SwiftProtobuf's value. `PublishFrameDecodingTests`
/// holds it to that for random, mutated and hostile frames.
enum PublishFrameDecoding {
    private typealias Reader = ProtobufWireReader

    static func decode(_ bytes: Data) -> WireClientFrame? {
        decodePublish(bytes).map { WireClientFrame(requestID: $0.requestID, publish: $0.publish) }
    }

    /// The request id and the publish alone (``FrameCodec/ClientFrameOrPublish``).
    static func decodePublish(_ bytes: Data) -> (requestID: UInt64, publish: WirePublish)? {
        bytes.withUnsafeBytes { raw -> (UInt64, WirePublish)? in
            var reader = Reader(raw)
            var last = 0
            var requestID: UInt64 = 0
            // An optional request id (field 1, a varint), then the publish
            // (field 11, length-delimited) and nothing after it.
            guard var field = reader.fieldInOrder(after: &last) else { return nil }
            if field == (1, .varint) {
                guard let id = reader.varint(), let next = reader.fieldInOrder(after: &last) else { return nil }
                requestID = id
                field = next
            }
            guard field == (11, .lengthDelimited), let range = reader.lengthDelimited(), reader.isAtEnd,
                let publish = Self.publish(raw, range, in: bytes)
            else { return nil }
            return (requestID, publish)
        }
    }

    /// `Publish`'s fields, each at most once and in order.
    private static func publish(_ raw: UnsafeRawBufferPointer, _ range: Range<Int>, in bytes: Data) -> WirePublish? {
        var reader = Reader(raw, range)
        var last = 0
        var publish = WirePublish()
        while !reader.isAtEnd {
            guard let field = reader.fieldInOrder(after: &last) else { return nil }
            switch field {
            case (1, .lengthDelimited):
                guard let value = reader.lengthDelimited(),
                    let topic = Reader.utf8(raw, value)
                else { return nil }
                publish.topic = topic
            case (2, .lengthDelimited):
                guard let value = reader.lengthDelimited() else { return nil }
                publish.payload = slice(value, of: bytes)
            case (3, .lengthDelimited):
                guard let value = reader.lengthDelimited() else { return nil }
                publish.idempotencyKey = Reader.copy(raw, value)
            case (4, .varint):
                guard let value = reader.varint() else { return nil }
                publish.shouldPush = value != 0
            case (5, .varint):
                guard let value = reader.varint() else { return nil }
                publish.expiresAtMs = Int64(bitPattern: value)
            case (6, .lengthDelimited):
                guard let value = reader.lengthDelimited(), let proof = topicProof(raw, value) else {
                    return nil
                }
                publish.proof = proof
            case (7, .varint):
                guard let value = reader.varint() else { return nil }
                publish.control = value != 0
            case (8, .varint):
                guard let value = reader.varint() else { return nil }
                publish.expectedControlSeq = value
            case (9, .lengthDelimited):
                guard let value = reader.lengthDelimited() else { return nil }
                publish.rotateAccessKey = Reader.copy(raw, value)
            default:
                return nil
            }
        }
        return publish
    }

    private static func topicProof(_ raw: UnsafeRawBufferPointer, _ range: Range<Int>) -> WireTopicProof? {
        var reader = Reader(raw, range)
        var last = 0
        var proof = WireTopicProof()
        while !reader.isAtEnd {
            guard let field = reader.fieldInOrder(after: &last), field.type == .lengthDelimited,
                let value = reader.lengthDelimited()
            else { return nil }
            switch field.field {
            case 1: proof.accessKey = Reader.copy(raw, value)
            case 2: proof.signature = Reader.copy(raw, value)
            default: return nil
            }
        }
        return proof
    }

    /// The bytes at `range` (offsets from the frame's first byte), sharing
    /// the frame's storage; an empty field is the default, as SwiftProtobuf
    /// leaves it.
    private static func slice(_ range: Range<Int>, of bytes: Data) -> Data {
        guard !range.isEmpty else { return Data() }
        return bytes[(bytes.startIndex + range.lowerBound)..<(bytes.startIndex + range.upperBound)]
    }
}
