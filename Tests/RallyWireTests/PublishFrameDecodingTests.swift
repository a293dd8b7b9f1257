import Foundation
import Testing

@testable import RallyWire

/// The hand-read publish frame is SwiftProtobuf's decoding whenever it
/// takes a frame, takes every frame an encoder writes, and leaves the rest
/// (malformed, hostile, or merely unusual) to SwiftProtobuf.
@Suite("Publish frames read by hand")
struct PublishFrameDecodingTests {
    private static let edgeUInt64: [UInt64] = [0, 1, 127, 128, 16_383, 16_384, 1 << 35, .max - 1, .max]
    private static let edgeInt64: [Int64] = [0, 1, -1, 127, 128, .max, .min, -300]

    /// SwiftProtobuf's decoding, with the codec's options and no hand path.
    private static func reference(_ bytes: Data) throws -> WireClientFrame {
        try FrameCodec.decode(WireClientFrame.self, from: bytes, limit: .max)
    }

    /// Publishes with every field present or not, at its edges and at random.
    private static func randomFrames(count: Int, seed: UInt64) -> [WireClientFrame] {
        var random = SeededGenerator(seed: seed)
        return (0..<count).map { index in
            var publish = WirePublish()
            func maybe() -> Bool { Bool.random(using: &random) }
            if maybe() {
                publish.topic =
                    ["group/", "inbox/", "vault/", "ünïcode/🚀/", ""].randomElement(using: &random)!
                    + String(UInt64.random(in: 0 ... .max, using: &random), radix: 36)
            }
            if maybe() { publish.payload = random.bytes([0, 1, 14, 15, 256, 70_000].randomElement(using: &random)!) }
            if maybe() { publish.idempotencyKey = random.bytes([0, 16].randomElement(using: &random)!) }
            if maybe() { publish.shouldPush = maybe() }
            if maybe() { publish.expiresAtMs = edgeInt64[index % edgeInt64.count] }
            if maybe() {
                var proof = WireTopicProof()
                if maybe() { proof.accessKey = random.bytes(32) }
                if maybe() { proof.signature = random.bytes(64) }
                publish.proof = proof
            }
            if maybe() { publish.control = maybe() }
            if maybe() { publish.expectedControlSeq = edgeUInt64[index % edgeUInt64.count] }
            if maybe() { publish.rotateAccessKey = random.bytes(32) }
            var frame = WireClientFrame()
            if maybe() { frame.requestID = edgeUInt64[(index / 3) % edgeUInt64.count] }
            frame.publish = publish
            return frame
        }
    }

    /// What the relay's event loop takes as a publish alone, if it does.
    static func publishAlone(_ bytes: Data) -> (requestID: UInt64, publish: WirePublish)? {
        guard case .publish(let requestID, let publish)? = try? FrameCodec.decodeClientFrameOrPublish(bytes) else {
            return nil
        }
        return (requestID, publish)
    }

    @Test(
        "every publish an encoder writes, with each field present or not and at its edges, is read by hand to SwiftProtobuf's value"
    )
    func encodedPublishes() throws {
        for frame in Self.randomFrames(count: 600, seed: 0x9B1) {
            let bytes = FrameCodec.encode(frame)
            let hand = try #require(PublishFrameDecoding.decode(bytes), "\(frame)")
            #expect(hand == frame)
            #expect(hand == (try Self.reference(bytes)))
            #expect(hand.publish.hasProof == frame.publish.hasProof)
            #expect(try FrameCodec.decodeClientFrame(bytes) == frame)
            // The event loop's path: the same request id and publish, no frame.
            let taken = try #require(Self.publishAlone(bytes), "\(frame)")
            #expect(taken.requestID == frame.requestID && taken.publish == frame.publish)
        }
    }

    @Test("a frame that is a slice of a larger buffer is read from its own bytes")
    func sliceOfALargerBuffer() throws {
        let frame = Self.randomFrames(count: 1, seed: 3)[0]
        let framed = Data([0xFF, 0xFE, 0xFD]) + FrameCodec.encode(frame) + Data([0x01])
        let bytes = framed[3..<(framed.count - 1)]
        #expect(PublishFrameDecoding.decode(bytes) == frame)
    }

    @Test("the payload shares the frame's storage; the small fields, which caches and the index keep, do not")
    func payloadIsASlice() throws {
        var frame = WireClientFrame()
        frame.requestID = 9
        frame.publish.topic = "group/abc"
        frame.publish.payload = Data(repeating: 0x5A, count: 256)
        frame.publish.idempotencyKey = Data(repeating: 0x11, count: 16)
        frame.publish.proof.accessKey = Data(repeating: 0x22, count: 32)
        frame.publish.proof.signature = Data(repeating: 0x33, count: 64)
        frame.publish.rotateAccessKey = Data(repeating: 0x44, count: 32)
        let bytes = FrameCodec.encode(frame)
        let hand = try #require(PublishFrameDecoding.decode(bytes))
        #expect(hand == frame)
        let frameStart = bytes.withUnsafeBytes { UInt(bitPattern: $0.baseAddress!) }
        let frameRange = frameStart..<frameStart + UInt(bytes.count)
        func inFrame(_ field: Data) -> Bool {
            frameRange.contains(field.withUnsafeBytes { UInt(bitPattern: $0.baseAddress!) })
        }
        #expect(inFrame(hand.publish.payload))
        for field in [
            hand.publish.idempotencyKey, hand.publish.proof.accessKey, hand.publish.proof.signature,
            hand.publish.rotateAccessKey,
        ] {
            #expect(!inFrame(field))
        }
    }

    @Test(
        "every cut, flipped bit and inserted byte: what the hand path takes is SwiftProtobuf's value, the rest is decoded or refused by it with a typed error"
    )
    func mutations() throws {
        var random = SeededGenerator(seed: 0x3F7)
        var audit = HandPathAudit<WireClientFrame>()
        var mismatches: [String] = []
        for frame in Self.randomFrames(count: 60, seed: 0xC0DE) {
            let bytes = FrameCodec.encode(frame)
            guard bytes.count < 2_000 else { continue }
            let variants = random.mutations(of: bytes, count: 150)
            for variant in variants {
                let reference = try? Self.reference(variant)
                // The event loop's path takes a publish alone exactly when
                // the hand reader does (decodeClientFrame, checked below, is
                // that path with the frame built around the publish).
                if (Self.publishAlone(variant) == nil) != (PublishFrameDecoding.decode(variant) == nil) {
                    mismatches.append("taken by one path only: " + variant.base64EncodedString())
                }
                audit.check(variant, reference: reference, hand: PublishFrameDecoding.decode(variant)) {
                    try FrameCodec.decodeClientFrame(variant)
                }
            }
        }
        #expect(mismatches.isEmpty, "\(mismatches.prefix(3))")
        #expect(audit.mismatches.isEmpty, "\(audit.mismatches.prefix(3))")
        // The mutations leave many frames well formed: the hand path must
        // have taken some, or this test checks nothing of it.
        #expect(audit.taken > 1_000)
    }

    /// Publish fields from `ProtoBytes`, wrapped in a client frame.
    private static func frame(_ publishFields: Data, requestID: UInt64 = 5) -> Data {
        ProtoBytes.varintField(1, requestID) + ProtoBytes.bytesField(11, publishFields)
    }

    @Test(
        "frames in shapes the hand path leaves alone decode as SwiftProtobuf decodes them",
        arguments: [
            (
                "a field given twice (the last wins)",
                ProtoBytes.bytesField(1, Data("group/a".utf8)) + ProtoBytes.bytesField(1, Data("group/b".utf8))
            ),
            (
                "fields out of order",
                ProtoBytes.bytesField(2, Data([1, 2])) + ProtoBytes.bytesField(1, Data("group/a".utf8))
            ),
            ("an unknown field", ProtoBytes.bytesField(1, Data("group/a".utf8)) + ProtoBytes.varintField(40, 7)),
            ("an unknown field in the proof", ProtoBytes.bytesField(6, ProtoBytes.varintField(3, 1))),
            (
                "a proof given twice (merged)",
                ProtoBytes.bytesField(6, ProtoBytes.bytesField(1, Data([1])))
                    + ProtoBytes.bytesField(6, ProtoBytes.bytesField(2, Data([2])))
            ),
            ("an overlong but valid varint", ProtoBytes.tag(field: 4, wireType: 0) + Data([0x81, 0x80, 0x80, 0x00])),
            // SwiftProtobuf reads a tag of up to five bytes; the hand path
            // takes one-byte tags only.
            ("a tag padded to two bytes", Data([0x8A, 0x00]) + ProtoBytes.varint(7) + Data("group/a".utf8)),
            // SwiftProtobuf drops the bits past 64; the hand path leaves it.
            (
                "a ten-byte varint past 64 bits",
                ProtoBytes.tag(field: 8, wireType: 0) + Data(repeating: 0xFF, count: 9) + Data([0x02])
            ),
        ] as [(String, Data)])
    func unusualShapes(_ shape: (String, Data)) throws {
        let bytes = Self.frame(shape.1)
        let reference = try Self.reference(bytes)
        if let hand = PublishFrameDecoding.decode(bytes) { #expect(hand == reference, "\(shape.0)") }
        #expect(try FrameCodec.decodeClientFrame(bytes) == reference, "\(shape.0)")
    }

    @Test(
        "hostile publish frames are refused as malformed, never read by hand",
        arguments: [
            ("a length past the end", ProtoBytes.tag(field: 2, wireType: 2) + ProtoBytes.varint(1 << 40) + Data([1])),
            ("a length one past the end", ProtoBytes.tag(field: 2, wireType: 2) + ProtoBytes.varint(3) + Data([1, 2])),
            (
                "an eleven-byte varint",
                ProtoBytes.tag(field: 8, wireType: 0) + Data(repeating: 0xFF, count: 10) + Data([1])
            ),
            ("a cut-off varint", ProtoBytes.tag(field: 8, wireType: 0) + Data([0xFF, 0xFF])),
            (
                "a topic tag padded to six bytes",
                Data([0x8A, 0x80, 0x80, 0x80, 0x80, 0x00]) + ProtoBytes.varint(7) + Data("group/a".utf8)
            ),
            (
                "a proof field's tag padded to six bytes",
                ProtoBytes.bytesField(6, Data([0x8A, 0x80, 0x80, 0x80, 0x80, 0x00]) + ProtoBytes.varint(1) + Data([1]))
            ),
            ("a topic that is not UTF-8", ProtoBytes.bytesField(1, Data([0x67, 0xC3, 0x28]))),
            (
                "a proof whose length lies",
                ProtoBytes.bytesField(6, ProtoBytes.tag(field: 1, wireType: 2) + ProtoBytes.varint(90))
            ),
        ] as [(String, Data)])
    func hostile(_ shape: (String, Data)) {
        let bytes = Self.frame(shape.1)
        #expect(PublishFrameDecoding.decode(bytes) == nil, "\(shape.0)")
        #expect(Self.publishAlone(bytes) == nil, "\(shape.0)")
        #expect(throws: FrameDecodingError.self, "\(shape.0)") { try FrameCodec.decodeClientFrame(bytes) }
    }

    @Test("a client frame whose request id tag is padded to six bytes is refused, not read by hand")
    func paddedTopLevelTag() {
        let bytes = Data([0x88, 0x80, 0x80, 0x80, 0x80, 0x00, 0x01, 0x5A, 0x00])
        #expect(PublishFrameDecoding.decode(bytes) == nil)
        #expect(throws: FrameDecodingError.self) { try FrameCodec.decodeClientFrame(bytes) }
    }

    @Test("bytes after the publish, an empty frame and an oversized one are never taken by hand")
    func edges() throws {
        let publish = FrameCodec.encode(Self.randomFrames(count: 1, seed: 11)[0])
        let trailing = publish + ProtoBytes.varintField(1, 3)
        #expect(PublishFrameDecoding.decode(trailing) == nil)
        #expect(try FrameCodec.decodeClientFrame(trailing) == (try Self.reference(trailing)))
        #expect(throws: FrameDecodingError.empty) { try FrameCodec.decodeClientFrame(Data()) }
        var large = WireClientFrame()
        large.publish.payload = Data(count: WireLimits.maxFrameBytes)
        let oversized = FrameCodec.encode(large)
        #expect(PublishFrameDecoding.decode(oversized) != nil)
        #expect(Self.publishAlone(oversized) == nil)
        #expect(throws: FrameDecodingError.tooLarge(size: oversized.count, limit: WireLimits.maxFrameBytes)) {
            try FrameCodec.decodeClientFrame(oversized)
        }
    }
}
