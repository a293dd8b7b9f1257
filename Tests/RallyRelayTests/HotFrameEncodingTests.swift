import Foundation
import NIOCore
import RallyTestSupport
import RallyWire
import RallyWireLoad
import Testing

@testable import RallyRelay

/// The hand encodings of the ack and the live envelope are WebSocket frames
/// holding SwiftProtobuf's encodings, byte for byte.
@Suite("Hot frame encoding")
struct HotFrameEncodingTests {
    /// Values at the edges of each varint length, and of the signed ones.
    private static let edgeUInt64: [UInt64] = [0, 1, 127, 128, 16_383, 16_384, 1 << 35, .max - 1, .max]
    private static let edgeInt64: [Int64] = [0, 1, -1, 127, 128, .max, .min, -300]

    /// The message of a hand-encoded frame, read as a client reads it: the
    /// buffer must hold exactly one final binary WebSocket frame.
    private static func bytes(_ buffer: ByteBuffer) -> [UInt8] {
        var reader = ServerFrameReader()
        reader.append(Array(buffer.readableBytesView))
        guard let frame = try? reader.next(), frame.kind == .binary, reader.pendingBytes == 0 else { return [0xFF] }
        return frame.payload
    }

    @Test("a publish ack, at the edges of every field and at random, is SwiftProtobuf's encoding")
    func publishAcks() {
        var random = SeededGenerator(seed: 0xAC4)
        var cases: [(UInt64, String, UInt64, Int64, Bool)] = []
        for value in Self.edgeUInt64 { cases.append((value, "group/a", value, 0, false)) }
        for value in Self.edgeInt64 { cases.append((1, "", 0, value, true)) }
        for _ in 0..<500 {
            cases.append(
                (
                    UInt64.random(in: 0 ... .max, using: &random) >> UInt64.random(in: 0...63, using: &random),
                    String(repeating: "b", count: Int.random(in: 0..<200, using: &random)),
                    UInt64.random(in: 0 ... .max, using: &random) >> UInt64.random(in: 0...63, using: &random),
                    Int64.random(in: .min ... .max, using: &random) >> Int64.random(in: 0...63, using: &random),
                    Bool.random(using: &random)
                ))
        }
        for (requestID, topic, seq, serverTime, duplicate) in cases {
            var frame = WireServerFrame()
            frame.requestID = requestID
            frame.publishAck.topic = topic
            frame.publishAck.seq = seq
            frame.publishAck.serverTimeMs = serverTime
            frame.publishAck.duplicate = duplicate
            let hand = HotFrameEncoding.publishAck(
                requestID: requestID, topic: topic, seq: seq, serverTimeMs: serverTime, duplicate: duplicate)
            #expect(Self.bytes(hand) == Array(FrameCodec.encode(frame)), "\(frame)")
        }
    }

    @Test("a live envelope, empty, at the edges of every field and at random, is SwiftProtobuf's encoding")
    func envelopes() {
        var random = SeededGenerator(seed: 0xE7)
        var envelopes: [WireEnvelope] = [WireEnvelope()]
        for (index, value) in Self.edgeInt64.enumerated() {
            var envelope = WireEnvelope()
            envelope.topic = "group/" + String(index)
            envelope.seq = Self.edgeUInt64[index]
            envelope.serverTimeMs = value
            envelope.expiresAtMs = value
            envelope.payload = Data(count: [0, 1, 127, 128, 16_384, 70_000, 3, 2][index])
            envelope.shouldPush = index % 2 == 0
            envelope.control = index % 3 == 0
            envelopes.append(envelope)
        }
        for _ in 0..<500 {
            var envelope = WireEnvelope()
            envelope.topic = String(repeating: "t", count: Int.random(in: 0..<170, using: &random))
            envelope.seq = UInt64.random(in: 0 ... .max, using: &random) >> UInt64.random(in: 0...63, using: &random)
            envelope.serverTimeMs =
                Int64.random(in: .min ... .max, using: &random) >> Int64.random(in: 0...63, using: &random)
            envelope.payload = random.bytes(Int.random(in: 0..<600, using: &random))
            envelope.shouldPush = Bool.random(using: &random)
            envelope.expiresAtMs =
                Int64.random(in: 0 ... .max, using: &random) >> Int64.random(in: 0...63, using: &random)
            envelope.control = Bool.random(using: &random)
            envelopes.append(envelope)
        }
        for envelope in envelopes {
            var frame = WireServerFrame()
            frame.envelope = envelope
            #expect(Self.bytes(HotFrameEncoding.envelope(envelope)) == Array(FrameCodec.encode(frame)))
        }
    }

    @Test("a topic beyond ASCII and a payload sliced out of a larger buffer are written as SwiftProtobuf writes them")
    func nonASCIITopicAndSlicedPayload() {
        // The hand-read publish hands its payload over as a slice of the
        // client's frame, whose indices do not start at zero.
        let whole = Data((0..<400).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        var envelope = WireEnvelope()
        envelope.topic = "grüße/ü€😀"
        envelope.seq = 300
        envelope.payload = whole[37..<301]
        var frame = WireServerFrame()
        frame.envelope = envelope
        #expect(envelope.payload.startIndex == 37)
        #expect(Self.bytes(HotFrameEncoding.envelope(envelope)) == Array(FrameCodec.encode(frame)))

        var ack = WireServerFrame()
        ack.requestID = 9
        ack.publishAck.topic = envelope.topic
        ack.publishAck.seq = 300
        let hand = HotFrameEncoding.publishAck(
            requestID: 9, topic: envelope.topic, seq: 300, serverTimeMs: 0, duplicate: false)
        #expect(Self.bytes(hand) == Array(FrameCodec.encode(ack)))
    }

    @Test("varint sizes at every boundary of seven bits")
    func varintSizes() {
        #expect(HotFrameEncoding.varintSize(0) == 1)
        for bits in 1...64 {
            let value = bits == 64 ? UInt64.max : (UInt64(1) << UInt64(bits)) - 1
            #expect(HotFrameEncoding.varintSize(value) == (bits + 6) / 7, "\(bits) bits")
        }
    }
}
