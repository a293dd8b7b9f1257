import RallyWire

/// What the load generator needs of a server frame, read from its protobuf
/// bytes without building the message: the request it answers, which body
/// it carries and, for an envelope, where its payload is. Decoding each ack
/// and delivery in full (a `WireServerFrame`, its envelope, a copy of the
/// payload) was a tenth of the generator's CPU, and the generator shares
/// the machine's cores with the relay it measures, as `redis-benchmark`
/// shares them with Redis.
///
/// Anything it cannot read is nil; the generator then decodes the frame in
/// full, which says what is wrong with it.
struct SkimmedServerFrame: Equatable, Sendable {
    /// `ServerFrame`'s body fields (relay.proto).
    enum Body: Int, Sendable {
        case publishAck = 12
        case envelope = 14
    }

    var requestID: UInt64 = 0
    /// The field number of the body, the last one as protobuf's oneof
    /// reads it; 0 for none.
    var bodyField = 0
    /// For an envelope: its payload's byte range in the frame.
    var payload: Range<Int>? = nil

    var body: Body? { Body(rawValue: bodyField) }

    private static let requestIDField = 1
    /// `ServerFrame`'s oneof runs from field 10 to 18.
    private static let bodyFields = 10...18
    private static let envelopePayloadField = 4

    /// Reads a `ServerFrame`; nil for bytes that are not one.
    static func skim(_ bytes: UnsafeRawBufferPointer) -> SkimmedServerFrame? {
        var frame = SkimmedServerFrame()
        var reader = ProtobufWireReader(bytes)
        while !reader.isAtEnd {
            guard let (field, type) = reader.tag() else { return nil }
            switch (field, type) {
            case (requestIDField, .varint):
                guard let value = reader.varint() else { return nil }
                frame.requestID = value
            case (bodyFields, .lengthDelimited):
                guard let body = reader.lengthDelimited() else { return nil }
                frame.bodyField = field
                frame.payload = nil
                if field == Body.envelope.rawValue {
                    guard let payload = envelopePayload(bytes, in: body) else { return nil }
                    frame.payload = payload
                }
            default:
                guard reader.skip(type) else { return nil }
            }
        }
        return frame
    }

    /// The envelope's payload range (empty when it has none).
    private static func envelopePayload(_ bytes: UnsafeRawBufferPointer, in range: Range<Int>) -> Range<Int>? {
        var reader = ProtobufWireReader(bytes, range)
        var payload = range.lowerBound..<range.lowerBound
        while !reader.isAtEnd {
            guard let (field, type) = reader.tag() else { return nil }
            if field == envelopePayloadField, type == .lengthDelimited {
                guard let found = reader.lengthDelimited() else { return nil }
                payload = found
            } else if !reader.skip(type) {
                return nil
            }
        }
        return payload
    }
}
