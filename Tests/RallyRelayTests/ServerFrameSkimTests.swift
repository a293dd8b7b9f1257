import Foundation
import RallyTestSupport
import RallyWire
import Testing

@testable import RallyWireLoad

/// The load generator's skim of server frames: it must read what the full
/// protobuf decoder reads from every frame that decoder accepts, and
/// refuse, without reading past the bytes, what is not a frame.
@Suite("Server frame skim")
struct ServerFrameSkimTests {
    private static func skim(_ bytes: [UInt8]) -> SkimmedServerFrame? {
        bytes.withUnsafeBytes { SkimmedServerFrame.skim($0) }
    }

    private static func bodyField(_ frame: WireServerFrame) -> Int {
        switch frame.body {
        case .challenge?: 10
        case .authenticated?: 11
        case .publishAck?: 12
        case .subscribed?: 13
        case .envelope?: 14
        case .pong?: 15
        case .error?: 16
        case .keyBundle?: 17
        case .unsubscribed?: 18
        case nil: 0
        }
    }

    /// A frame of one of the kinds a relay sends, with random contents.
    private static func randomFrame(using random: inout SeededGenerator) -> WireServerFrame {
        var frame = WireServerFrame()
        if Bool.random(using: &random) { frame.requestID = UInt64.random(in: 0 ... .max, using: &random) }
        switch Int.random(in: 0..<5, using: &random) {
        case 0:
            var ack = WirePublishAck()
            ack.topic = "group/" + String(repeating: "a", count: Int.random(in: 0..<70, using: &random))
            ack.seq = UInt64.random(in: 0...1 << 40, using: &random)
            ack.duplicate = Bool.random(using: &random)
            frame.publishAck = ack
        case 1, 2:
            var envelope = WireEnvelope()
            envelope.topic = "bench/" + String(repeating: "f", count: Int.random(in: 0..<64, using: &random))
            envelope.seq = UInt64.random(in: 0...1 << 40, using: &random)
            envelope.serverTimeMs = Int64.random(in: -1...1 << 50, using: &random)
            envelope.payload = random.bytes(Int.random(in: 0..<700, using: &random))
            envelope.shouldPush = Bool.random(using: &random)
            envelope.expiresAtMs = Int64.random(in: 0...1 << 45, using: &random)
            envelope.control = Bool.random(using: &random)
            frame.envelope = envelope
        case 3:
            var error = WireError()
            error.message = "refused"
            frame.error = error
        default:
            var challenge = WireChallenge()
            challenge.nonce = random.bytes(32)
            challenge.serverTimeMs = 5
            frame.challenge = challenge
        }
        return frame
    }

    /// Fields this client does not know, of every wire type a proto3 peer
    /// may add: a newer relay's.
    private static let unknownFields: [UInt8] = [
        0xF8, 0x01, 0x2A,  // field 31, varint
        0x81, 0x02, 1, 2, 3, 4, 5, 6, 7, 8,  // field 32, fixed64
        0x8A, 0x02, 0x03, 9, 9, 9,  // field 33, bytes
        0x95, 0x02, 1, 2, 3, 4,  // field 34, fixed32
    ]

    @Test(
        "every frame the full decoder reads, with or without unknown fields, skims to its request id, body and payload")
    func agreesWithTheDecoder() throws {
        var random = SeededGenerator(seed: 0x5EED_5C1A)
        for round in 0..<2000 {
            let frame = Self.randomFrame(using: &random)
            var bytes = Array(FrameCodec.encode(frame))
            if round % 3 == 0 { bytes = Self.unknownFields + bytes }
            if round % 5 == 0 { bytes += Self.unknownFields }
            let decoded = try FrameCodec.decodeServerFrame(Data(bytes))
            let skimmed = try #require(Self.skim(bytes), "round \(round)")
            #expect(skimmed.requestID == decoded.requestID)
            #expect(skimmed.bodyField == Self.bodyField(decoded))
            if case .envelope(let envelope)? = decoded.body {
                let range = try #require(skimmed.payload)
                #expect(Data(bytes[range]) == envelope.payload)
            } else {
                #expect(skimmed.payload == nil)
            }
        }
    }

    @Test("every truncation of a frame skims to nil or to ranges inside the bytes it was given")
    func truncated() {
        var random = SeededGenerator(seed: 7)
        for _ in 0..<50 {
            let bytes = Array(FrameCodec.encode(Self.randomFrame(using: &random)))
            for end in 0..<bytes.count {
                let prefix = Array(bytes[..<end])
                guard let skimmed = Self.skim(prefix) else { continue }
                if let payload = skimmed.payload { #expect(payload.upperBound <= end) }
            }
        }
    }

    @Test(
        "hostile bytes skim to nil: an 11-byte varint, a tenth byte past 64 bits, a length past the end, field 0, group and reserved wire types"
    )
    func hostile() {
        #expect(Self.skim([0x08] + [UInt8](repeating: 0xFF, count: 10) + [0x01]) == nil)
        #expect(Self.skim([0x08] + [UInt8](repeating: 0xFF, count: 9) + [0x02]) == nil)
        #expect(Self.skim([0x72, 0x05, 1, 2]) == nil)
        #expect(Self.skim([0x72, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01]) == nil)
        #expect(Self.skim([0x72, 0x04, 0x22, 0x09, 1, 2]) == nil, "an envelope whose payload runs past it")
        #expect(Self.skim([0x00, 0x01]) == nil)
        #expect(Self.skim([0x0B]) == nil)
        #expect(Self.skim([0x0C]) == nil)
        #expect(Self.skim([0x0E, 0x01]) == nil)
        #expect(Self.skim([0x09, 1, 2, 3]) == nil, "a fixed64 cut short")
        #expect(Self.skim([]) == SkimmedServerFrame())
    }

    @Test("of several bodies the last counts, as a oneof reads them; an ack after an envelope has no payload")
    func lastBodyWins() {
        var envelope = WireServerFrame()
        envelope.envelope.payload = Data([1, 2, 3])
        var ack = WireServerFrame()
        ack.publishAck.seq = 4
        ack.requestID = 9
        let bytes = Array(FrameCodec.encode(envelope)) + Array(FrameCodec.encode(ack))
        #expect(Self.skim(bytes) == SkimmedServerFrame(requestID: 9, bodyField: 12, payload: nil))
    }
}
