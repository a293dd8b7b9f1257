import Foundation
import NIOCore
import RallyWire

/// The two server frames a publish makes, a `PublishAck` for its publisher
/// and an `Envelope` for each live subscriber, encoded by hand into the
/// buffer the socket writes: behind their WebSocket header, byte for byte
/// what SwiftProtobuf writes (proto3: fields in number order, defaults left
/// out). Both are built on the commit's path, once per publish; SwiftProtobuf
/// built a message value, visited it, and copied the bytes from a `Data`
/// into the buffer, which framing then copied again. Nothing here allocates
/// but the buffer.
///
/// Field numbers are relay.proto's; `HotFrameEncodingTests` holds each
/// encoding to SwiftProtobuf's for random and edge values.
enum HotFrameEncoding {
    /// `ServerFrame { request_id, publish_ack { topic, seq, server_time_ms, duplicate } }`.
    static func publishAck(
        requestID: UInt64, topic: String, seq: UInt64, serverTimeMs: Int64, duplicate: Bool
    )
        -> ByteBuffer
    {
        let serverTime = UInt64(bitPattern: serverTimeMs)
        let body =
            bytesFieldSize(topic.utf8.count) + varintFieldSize(seq) + varintFieldSize(serverTime)
            + varintFieldSize(duplicate ? 1 : 0)
        return frame(requestID: requestID, body: 12, bodyBytes: body) { frame in
            frame.bytesField(1, topic)
            frame.varintField(2, seq)
            frame.varintField(3, serverTime)
            frame.varintField(4, duplicate ? 1 : 0)
        }
    }

    /// `ServerFrame { envelope { topic, seq, server_time_ms, payload, should_push, expires_at_ms, control } }`,
    /// pushed (request id 0).
    static func envelope(_ envelope: WireEnvelope) -> ByteBuffer {
        let serverTime = UInt64(bitPattern: envelope.serverTimeMs)
        let expiresAt = UInt64(bitPattern: envelope.expiresAtMs)
        let body =
            bytesFieldSize(envelope.topic.utf8.count) + varintFieldSize(envelope.seq) + varintFieldSize(serverTime)
            + bytesFieldSize(envelope.payload.count) + varintFieldSize(envelope.shouldPush ? 1 : 0)
            + varintFieldSize(expiresAt) + varintFieldSize(envelope.control ? 1 : 0)
        return frame(requestID: 0, body: 14, bodyBytes: body) { frame in
            frame.bytesField(1, envelope.topic)
            frame.varintField(2, envelope.seq)
            frame.varintField(3, serverTime)
            frame.bytesField(4, envelope.payload)
            frame.varintField(5, envelope.shouldPush ? 1 : 0)
            frame.varintField(6, expiresAt)
            frame.varintField(7, envelope.control ? 1 : 0)
        }
    }

    /// A WebSocket frame of the message's exact size, holding the message's
    /// request id and the body's tag and length; `body` writes the rest. A
    /// body is written even when empty: the oneof says which it is.
    private static func frame(
        requestID: UInt64, body number: UInt8, bodyBytes: Int, _ body: (inout FrameBytesWriter) -> Void
    ) -> ByteBuffer {
        let length = varintFieldSize(requestID) + 1 + varintSize(UInt64(bodyBytes)) + bodyBytes
        return ByteBuffer.webSocketServerFrame(length: length) { frame in
            frame.varintField(1, requestID)
            frame.byte(number << 3 | 2)
            frame.varint(UInt64(bodyBytes))
            body(&frame)
        }
    }

    /// A varint field's bytes: none for 0 (a bool is a varint of 1).
    private static func varintFieldSize(_ value: UInt64) -> Int { value == 0 ? 0 : 1 + varintSize(value) }

    /// A string or bytes field's: none when empty.
    private static func bytesFieldSize(_ count: Int) -> Int {
        count == 0 ? 0 : 1 + varintSize(UInt64(count)) + count
    }

    static func varintSize(_ value: UInt64) -> Int {
        // One byte per started group of seven bits; zero takes one.
        max(1, (64 - value.leadingZeroBitCount + 6) / 7)
    }
}
