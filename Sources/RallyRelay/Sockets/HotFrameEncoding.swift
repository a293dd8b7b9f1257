import Foundation
import NIOCore
import RallyWire

/// The two server frames a publish makes, a `PublishAck` for its publisher
/// and an `Envelope` for each live subscriber, encoded by hand into the
/// buffer the socket writes: byte for byte what SwiftProtobuf writes (proto3:
/// fields in number order, defaults left out). Both are built on the commit's
/// path, once per publish; SwiftProtobuf built a message value, visited it,
/// and copied the bytes from a `Data` into the buffer.
///
/// Field numbers are relay.proto's; `HotFrameEncodingTests` holds each
/// encoding to SwiftProtobuf's for random and edge values.
enum HotFrameEncoding {
    /// `ServerFrame.request_id`, `ServerFrame.publish_ack`, `ServerFrame.envelope`.
    private static let requestIDTag: UInt8 = 1 << 3 | 0
    private static let publishAckTag: UInt8 = 12 << 3 | 2
    private static let envelopeTag: UInt8 = 14 << 3 | 2

    /// `ServerFrame { request_id, publish_ack { topic, seq, server_time_ms, duplicate } }`.
    static func publishAck(
        requestID: UInt64, topic: String, seq: UInt64, serverTimeMs: Int64, duplicate: Bool
    )
        -> ByteBuffer
    {
        let topicBytes = topic.utf8.count
        var body = 0
        if topicBytes > 0 { body += 1 + varintSize(UInt64(topicBytes)) + topicBytes }
        if seq != 0 { body += 1 + varintSize(seq) }
        if serverTimeMs != 0 { body += 1 + varintSize(UInt64(bitPattern: serverTimeMs)) }
        if duplicate { body += 2 }
        var frame = ByteBufferAllocator().buffer(
            capacity: frameSize(requestID: requestID, body: body))
        writeHead(requestID: requestID, tag: publishAckTag, body: body, to: &frame)
        if topicBytes > 0 {
            frame.writeInteger(UInt8(1 << 3 | 2))
            writeVarint(UInt64(topicBytes), to: &frame)
            frame.writeString(topic)
        }
        if seq != 0 {
            frame.writeInteger(UInt8(2 << 3 | 0))
            writeVarint(seq, to: &frame)
        }
        if serverTimeMs != 0 {
            frame.writeInteger(UInt8(3 << 3 | 0))
            writeVarint(UInt64(bitPattern: serverTimeMs), to: &frame)
        }
        if duplicate { frame.writeBytes([4 << 3 | 0, 1]) }
        return frame
    }

    /// `ServerFrame { envelope { topic, seq, server_time_ms, payload, should_push, expires_at_ms, control } }`,
    /// pushed (request id 0).
    static func envelope(_ envelope: WireEnvelope) -> ByteBuffer {
        let topicBytes = envelope.topic.utf8.count
        let payloadBytes = envelope.payload.count
        var body = 0
        if topicBytes > 0 { body += 1 + varintSize(UInt64(topicBytes)) + topicBytes }
        if envelope.seq != 0 { body += 1 + varintSize(envelope.seq) }
        if envelope.serverTimeMs != 0 { body += 1 + varintSize(UInt64(bitPattern: envelope.serverTimeMs)) }
        if payloadBytes > 0 { body += 1 + varintSize(UInt64(payloadBytes)) + payloadBytes }
        if envelope.shouldPush { body += 2 }
        if envelope.expiresAtMs != 0 { body += 1 + varintSize(UInt64(bitPattern: envelope.expiresAtMs)) }
        if envelope.control { body += 2 }
        var frame = ByteBufferAllocator().buffer(capacity: frameSize(requestID: 0, body: body))
        writeHead(requestID: 0, tag: envelopeTag, body: body, to: &frame)
        if topicBytes > 0 {
            frame.writeInteger(UInt8(1 << 3 | 2))
            writeVarint(UInt64(topicBytes), to: &frame)
            frame.writeString(envelope.topic)
        }
        if envelope.seq != 0 {
            frame.writeInteger(UInt8(2 << 3 | 0))
            writeVarint(envelope.seq, to: &frame)
        }
        if envelope.serverTimeMs != 0 {
            frame.writeInteger(UInt8(3 << 3 | 0))
            writeVarint(UInt64(bitPattern: envelope.serverTimeMs), to: &frame)
        }
        if payloadBytes > 0 {
            frame.writeInteger(UInt8(4 << 3 | 2))
            writeVarint(UInt64(payloadBytes), to: &frame)
            frame.writeBytes(envelope.payload)
        }
        if envelope.shouldPush { frame.writeBytes([5 << 3 | 0, 1]) }
        if envelope.expiresAtMs != 0 {
            frame.writeInteger(UInt8(6 << 3 | 0))
            writeVarint(UInt64(bitPattern: envelope.expiresAtMs), to: &frame)
        }
        if envelope.control { frame.writeBytes([7 << 3 | 0, 1]) }
        return frame
    }

    private static func frameSize(requestID: UInt64, body: Int) -> Int {
        (requestID == 0 ? 0 : 1 + varintSize(requestID)) + 1 + varintSize(UInt64(body)) + body
    }

    /// The frame's request id, then the body's tag and length.
    private static func writeHead(requestID: UInt64, tag: UInt8, body: Int, to frame: inout ByteBuffer) {
        if requestID != 0 {
            frame.writeInteger(requestIDTag)
            writeVarint(requestID, to: &frame)
        }
        frame.writeInteger(tag)
        writeVarint(UInt64(body), to: &frame)
    }

    static func varintSize(_ value: UInt64) -> Int {
        // One byte per started group of seven bits; zero takes one.
        max(1, (64 - value.leadingZeroBitCount + 6) / 7)
    }

    private static func writeVarint(_ value: UInt64, to frame: inout ByteBuffer) {
        var value = value
        while value >= 0x80 {
            frame.writeInteger(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        frame.writeInteger(UInt8(value))
    }
}
