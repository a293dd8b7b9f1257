import Foundation
import RallyWire
import Testing

/// A named frame for table-driven tests.
struct ClientFrameCase: Sendable, CustomTestStringConvertible {
    let name: String
    let frame: WireClientFrame
    var testDescription: String { name }
}

struct ServerFrameCase: Sendable, CustomTestStringConvertible {
    let name: String
    let frame: WireServerFrame
    var testDescription: String { name }
}

enum SampleFrames {
    static let signedBundle: WireSignedKeyBundle = {
        var bundle = WireKeyBundle()
        bundle.signingPublicKey = Data(repeating: 0x11, count: 32)
        bundle.agreementPublicKey = Data(repeating: 0x22, count: 32)
        bundle.displayName = "Ada 🚀"
        bundle.createdAtMs = 1_700_000_000_123
        var signed = WireSignedKeyBundle()
        signed.bundle = FrameCodec.encode(bundle)
        signed.signature = Data(repeating: 0x33, count: 64)
        return signed
    }()

    static let publish: WireClientFrame = {
        var publish = WirePublish()
        publish.topic = "inbox/mzuhvlpymk6xo3epygfy5h4oeaejofef"
        var generator = SeededGenerator(seed: 7)
        publish.payload = generator.bytes(200)
        publish.idempotencyKey = generator.bytes(16)
        publish.shouldPush = true
        publish.expiresAtMs = 1_800_000_000_000
        var frame = WireClientFrame()
        frame.requestID = 300
        frame.publish = publish
        return frame
    }()

    static let clientFrames: [ClientFrameCase] = {
        var cases = [ClientFrameCase]()
        func add(_ name: String, _ build: (inout WireClientFrame) -> Void) {
            var frame = WireClientFrame()
            frame.requestID = UInt64(cases.count + 1) * 1_000_003
            build(&frame)
            cases.append(ClientFrameCase(name: name, frame: frame))
        }
        add("authenticate") {
            $0.authenticate.signingPublicKey = Data(repeating: 1, count: 32)
            $0.authenticate.signature = Data(repeating: 2, count: 64)
        }
        cases.append(ClientFrameCase(name: "publish", frame: publish))
        add("subscribe") {
            $0.subscribe.topic = "group/" + String(repeating: "ab", count: 32)
            $0.subscribe.afterSeq = .max
        }
        add("unsubscribe") { $0.unsubscribe.topic = "calls/room-1" }
        add("ping") { $0.ping.nonce = 0xDEAD_BEEF_CAFE }
        add("putKeyBundle") { $0.putKeyBundle.bundle = signedBundle }
        add("getKeyBundle") { $0.getKeyBundle.inboxID = "mzuhvlpymk6xo3epygfy5h4oeaejofef" }
        add("no body") { _ in }
        return cases
    }()

    static let serverFrames: [ServerFrameCase] = {
        var cases = [ServerFrameCase]()
        func add(_ name: String, _ build: (inout WireServerFrame) -> Void) {
            var frame = WireServerFrame()
            frame.requestID = UInt64(cases.count) * 7
            build(&frame)
            cases.append(ServerFrameCase(name: name, frame: frame))
        }
        add("challenge") {
            $0.challenge.nonce = Data(repeating: 9, count: 32)
            $0.challenge.serverTimeMs = 1_700_000_000_000
            $0.challenge.protocolVersion = WireLimits.protocolVersion
            $0.challenge.maxPayloadBytes = UInt32(WireLimits.maxPayloadBytes)
            $0.challenge.authTimeoutMs = 5_000
        }
        add("authenticated") { $0.authenticated.inboxID = "mzuhvlpymk6xo3epygfy5h4oeaejofef" }
        add("publishAck") {
            $0.publishAck.topic = "inbox/abc"
            $0.publishAck.seq = 42
            $0.publishAck.serverTimeMs = -1
            $0.publishAck.duplicate = true
        }
        add("subscribed") {
            $0.subscribed.topic = "group/x"
            $0.subscribed.caughtUpSeq = 17
        }
        add("envelope") {
            $0.envelope.topic = "inbox/abc"
            $0.envelope.seq = .max
            $0.envelope.serverTimeMs = .min
            $0.envelope.payload = Data((0...255).map { UInt8($0) })
            $0.envelope.shouldPush = true
            $0.envelope.expiresAtMs = 99
        }
        add("pong") {
            $0.pong.nonce = 5
            $0.pong.serverTimeMs = 6
        }
        add("error") {
            $0.error.code = .rateLimited
            $0.error.message = "slow down"
            $0.error.topic = "inbox/abc"
            $0.error.retryAfterMs = 1_500
        }
        add("error with unrecognized code") { $0.error.code = .UNRECOGNIZED(999) }
        add("keyBundle") { $0.keyBundle.bundle = signedBundle }
        add("unsubscribed") { $0.unsubscribed.topic = "group/x" }
        return cases
    }()
}

func clientResult(_ bytes: Data) -> Result<WireClientFrame, FrameDecodingError> {
    Result { () throws(FrameDecodingError) in try FrameCodec.decodeClientFrame(bytes) }
}

func serverResult(_ bytes: Data) -> Result<WireServerFrame, FrameDecodingError> {
    Result { () throws(FrameDecodingError) in try FrameCodec.decodeServerFrame(bytes) }
}

/// Whether a decode either worked or failed with `.malformed` (the only
/// acceptable outcome for non-empty input within the size limit).
func isDecodedOrMalformed<T>(_ result: Result<T, FrameDecodingError>) -> Bool {
    switch result {
    case .success: true
    case .failure(.malformed): true
    case .failure: false
    }
}

@Suite("FrameCodec")
struct FrameCodecTests {
    // MARK: Round trips

    @Test("client frame round trips", arguments: SampleFrames.clientFrames)
    func clientRoundTrip(_ sample: ClientFrameCase) throws {
        let bytes = FrameCodec.encode(sample.frame)
        let decoded = try FrameCodec.decodeClientFrame(bytes)
        #expect(decoded == sample.frame)
        #expect(decoded.body == sample.frame.body)
        #expect(FrameCodec.encode(decoded) == bytes)
    }

    @Test("server frame round trips", arguments: SampleFrames.serverFrames)
    func serverRoundTrip(_ sample: ServerFrameCase) throws {
        let bytes = FrameCodec.encode(sample.frame)
        let decoded = try FrameCodec.decodeServerFrame(bytes)
        #expect(decoded == sample.frame)
        #expect(decoded.body == sample.frame.body)
        #expect(FrameCodec.encode(decoded) == bytes)
    }

    @Test func encodingAnEmptyMessageGivesNoBytesAndDecodingThemIsEmpty() {
        let bytes = FrameCodec.encode(WireClientFrame())
        #expect(bytes.isEmpty)
        #expect(throws: FrameDecodingError.empty) { try FrameCodec.decodeClientFrame(bytes) }
    }

    // MARK: Size and emptiness

    @Test func emptyInputIsEmptyForBothDirections() {
        #expect(throws: FrameDecodingError.empty) { try FrameCodec.decodeClientFrame(Data()) }
        #expect(throws: FrameDecodingError.empty) { try FrameCodec.decodeServerFrame(Data()) }
        #expect(throws: FrameDecodingError.empty) {
            try FrameCodec.decode(WireKeyBundle.self, from: Data(), limit: 10)
        }
    }

    @Test func aValidFrameOfExactlyTheLimitDecodes() throws {
        let frame = Self.publishFrame(encodedSize: WireLimits.maxFrameBytes)
        let bytes = FrameCodec.encode(frame)
        #expect(bytes.count == WireLimits.maxFrameBytes)
        #expect(try FrameCodec.decodeClientFrame(bytes) == frame)
    }

    @Test func aValidFrameOneByteOverTheLimitIsTooLarge() {
        let bytes = FrameCodec.encode(Self.publishFrame(encodedSize: WireLimits.maxFrameBytes + 1))
        #expect(bytes.count == WireLimits.maxFrameBytes + 1)
        let limit = WireLimits.maxFrameBytes
        #expect(throws: FrameDecodingError.tooLarge(size: limit + 1, limit: limit)) {
            try FrameCodec.decodeClientFrame(bytes)
        }
        #expect(throws: FrameDecodingError.tooLarge(size: limit + 1, limit: limit)) {
            try FrameCodec.decodeServerFrame(bytes)
        }
    }

    @Test func theSizeIsCheckedBeforeParsing() {
        // Garbage that would be malformed is reported as too large first.
        let garbage = Data(repeating: 0xFF, count: 11)
        #expect(throws: FrameDecodingError.tooLarge(size: 11, limit: 10)) {
            try FrameCodec.decode(WireKeyBundle.self, from: garbage, limit: 10)
        }
        #expect(throws: FrameDecodingError.tooLarge(size: 11, limit: 0)) {
            try FrameCodec.decode(WireKeyBundle.self, from: garbage, limit: 0)
        }
    }

    @Test func aCustomLimitIsInclusive() throws {
        var bundle = WireKeyBundle()
        bundle.displayName = "abc"
        let bytes = FrameCodec.encode(bundle)
        #expect(try FrameCodec.decode(WireKeyBundle.self, from: bytes, limit: bytes.count) == bundle)
        #expect(throws: FrameDecodingError.tooLarge(size: bytes.count, limit: bytes.count - 1)) {
            try FrameCodec.decode(WireKeyBundle.self, from: bytes, limit: bytes.count - 1)
        }
    }

    // MARK: Truncation, garbage, bit flips

    @Test func everyPrefixOfAPublishFrameDecodesOnlyAtFieldBoundaries() throws {
        let full = FrameCodec.encode(SampleFrames.publish)
        #expect(try FrameCodec.decodeClientFrame(full) == SampleFrames.publish)
        // The only top-level field boundary inside the frame is right after
        // request_id; every other cut lands inside a field.
        var requestOnly = WireClientFrame()
        requestOnly.requestID = SampleFrames.publish.requestID
        let boundary = FrameCodec.encode(requestOnly).count
        #expect(full.prefix(boundary) == FrameCodec.encode(requestOnly))

        #expect(clientResult(full.prefix(0)) == .failure(.empty))
        for length in 1..<full.count {
            let result = clientResult(full.prefix(length))
            if length == boundary {
                #expect(result == .success(requestOnly), "prefix of \(length) bytes")
            } else {
                guard case .failure(.malformed) = result else {
                    Issue.record("prefix of \(length) bytes gave \(result), expected .malformed")
                    continue
                }
            }
        }
    }

    @Test func everyPrefixOfEveryServerFrameDecodesOrIsMalformed() {
        for sample in SampleFrames.serverFrames {
            let full = FrameCodec.encode(sample.frame)
            for length in 1..<max(full.count, 1) {
                let result = serverResult(full.prefix(length))
                #expect(isDecodedOrMalformed(result), "\(sample.name), prefix \(length): \(result)")
            }
        }
    }

    @Test func randomGarbageDecodesOrIsMalformed() {
        var generator = SeededGenerator(seed: 0x5EED_0001)
        var malformed = 0
        for iteration in 0..<4_000 {
            let length = Int.random(in: 1...512, using: &generator)
            let bytes = generator.bytes(length)
            let client = clientResult(bytes)
            let server = serverResult(bytes)
            #expect(isDecodedOrMalformed(client), "iteration \(iteration): \(client)")
            #expect(isDecodedOrMalformed(server), "iteration \(iteration): \(server)")
            if case .failure = client { malformed += 1 }
        }
        // Sanity: random bytes are overwhelmingly rejected, so the loop did
        // exercise the error path.
        #expect(malformed > 3_000)
    }

    @Test func singleBitFlipsDecodeOrAreMalformed() {
        let bytes = FrameCodec.encode(SampleFrames.publish)
        for bit in 0..<(bytes.count * 8) {
            var flipped = bytes
            flipped[bit / 8] ^= UInt8(1 << (bit % 8))
            let result = clientResult(flipped)
            #expect(isDecodedOrMalformed(result), "bit \(bit): \(result)")
            if case .success(let frame) = result {
                // Whatever decoded must re-encode and decode to itself.
                #expect(clientResult(FrameCodec.encode(frame)) == .success(frame), "bit \(bit)")
            }
        }
    }

    @Test func aKnownFieldWithTheWrongWireTypeIsKeptAsUnknownNotMisread() throws {
        // request_id (field 1, a varint) sent as length-delimited bytes, as a
        // future incompatible change might: protobuf treats it as unknown.
        let bytes = ProtoBytes.bytesField(1, Data("x".utf8))
        let frame = try FrameCodec.decodeClientFrame(bytes)
        #expect(frame.requestID == 0)
        #expect(frame.unknownFields.data == bytes)
        #expect(FrameCodec.encode(frame) == bytes)
    }

    @Test func aLengthPastTheEndIsMalformed() {
        // publish (field 11) claiming 100 bytes with 2 present.
        let bytes = ProtoBytes.tag(field: 11, wireType: 2) + ProtoBytes.varint(100) + Data([0x0A, 0x00])
        guard case .failure(.malformed) = clientResult(bytes) else {
            Issue.record("expected .malformed")
            return
        }
    }

    @Test func reservedWireTypesAreMalformed() {
        for wireType: UInt64 in [6, 7] {
            let bytes = ProtoBytes.tag(field: 1, wireType: wireType) + Data([0x01])
            guard case .failure(.malformed) = clientResult(bytes) else {
                Issue.record("wire type \(wireType): expected .malformed")
                continue
            }
        }
    }

    @Test func fieldNumberZeroIsMalformed() {
        guard case .failure(.malformed) = clientResult(Data([0x00, 0x01])) else {
            Issue.record("expected .malformed")
            return
        }
    }

    @Test func invalidUTF8InAStringFieldIsMalformed() {
        // Unsubscribe.topic (field 1) with a lone continuation byte, inside
        // ClientFrame.unsubscribe (field 13).
        let unsubscribe = ProtoBytes.bytesField(1, Data([0x80, 0x61]))
        let bytes = ProtoBytes.bytesField(13, unsubscribe)
        guard case .failure(.malformed) = clientResult(bytes) else {
            Issue.record("expected .malformed")
            return
        }
    }

    @Test func overlongVarintIsMalformed() {
        // request_id with an 11-byte varint.
        let bytes = Data([0x08]) + Data(repeating: 0xFF, count: 10) + Data([0x01])
        guard case .failure(.malformed) = clientResult(bytes) else {
            Issue.record("expected .malformed")
            return
        }
    }

    // MARK: Nesting

    @Test func shallowUnknownGroupsDecodeAndArePreserved() throws {
        let bytes = ProtoBytes.varintField(1, 5) + ProtoBytes.nestedGroups(field: 99, depth: 8)
        let frame = try FrameCodec.decodeClientFrame(bytes)
        #expect(frame.requestID == 5)
        #expect(frame.body == nil)
        #expect(FrameCodec.encode(frame) == bytes)
    }

    @Test("deeply nested groups are malformed, not a stack overflow", arguments: [64, 1_000, 60_000])
    func deepNestingIsMalformed(depth: Int) {
        let bytes = ProtoBytes.nestedGroups(field: 99, depth: depth)
        #expect(bytes.count <= WireLimits.maxFrameBytes)
        guard case .failure(.malformed) = clientResult(bytes) else {
            Issue.record("depth \(depth): expected .malformed")
            return
        }
        guard case .failure(.malformed) = serverResult(bytes) else {
            Issue.record("depth \(depth): expected .malformed")
            return
        }
    }

    @Test func deeplyNestedUnclosedGroupsAreMalformed() {
        var bytes = Data()
        for _ in 0..<50_000 { bytes += ProtoBytes.tag(field: 5, wireType: 3) }
        guard case .failure(.malformed) = clientResult(bytes) else {
            Issue.record("expected .malformed")
            return
        }
    }

    @Test func groupClosedWithTheWrongFieldIsMalformed() {
        let bytes = ProtoBytes.tag(field: 99, wireType: 3) + ProtoBytes.tag(field: 98, wireType: 4)
        guard case .failure(.malformed) = clientResult(bytes) else {
            Issue.record("expected .malformed")
            return
        }
    }

    // MARK: Forward compatibility

    @Test func unknownTopLevelFieldsArePreserved() throws {
        let known = FrameCodec.encode(SampleFrames.publish)
        let unknown = ProtoBytes.varintField(99, 42) + ProtoBytes.bytesField(100, Data("future".utf8))
        let decoded = try FrameCodec.decodeClientFrame(known + unknown)
        #expect(decoded.requestID == SampleFrames.publish.requestID)
        #expect(decoded.publish == SampleFrames.publish.publish)
        #expect(decoded.unknownFields.data == unknown)
        #expect(FrameCodec.encode(decoded) == known + unknown)
    }

    @Test func unknownFieldsInsideANestedMessageArePreserved() throws {
        let extra = ProtoBytes.bytesField(50, Data("new publish option".utf8))
        let publishBytes = FrameCodec.encode(SampleFrames.publish.publish) + extra
        let bytes = ProtoBytes.varintField(1, 8) + ProtoBytes.bytesField(11, publishBytes)
        let decoded = try FrameCodec.decodeClientFrame(bytes)
        #expect(decoded.requestID == 8)
        #expect(decoded.publish.topic == SampleFrames.publish.publish.topic)
        #expect(decoded.publish.payload == SampleFrames.publish.publish.payload)
        #expect(decoded.publish.unknownFields.data == extra)
        #expect(FrameCodec.encode(decoded) == bytes)
    }

    @Test func anUnknownFrameBodyDecodesWithNoBodyAndIsKept() throws {
        // A newer peer's frame type (a oneof member this build does not know).
        let futureBody = ProtoBytes.bytesField(40, ProtoBytes.varintField(1, 1))
        let bytes = ProtoBytes.varintField(1, 77) + futureBody
        let client = try FrameCodec.decodeClientFrame(bytes)
        #expect(client.requestID == 77)
        #expect(client.body == nil)
        #expect(client.unknownFields.data == futureBody)
        let server = try FrameCodec.decodeServerFrame(bytes)
        #expect(server.requestID == 77)
        #expect(server.body == nil)
        #expect(FrameCodec.encode(server) == bytes)
    }

    @Test func anUnknownErrorCodeIsKeptAsUnrecognized() throws {
        let error = ProtoBytes.varintField(1, 500)
        let bytes = ProtoBytes.bytesField(16, error)
        let frame = try FrameCodec.decodeServerFrame(bytes)
        #expect(frame.error.code == .UNRECOGNIZED(500))
        #expect(FrameCodec.encode(frame) == bytes)
    }

    // MARK: Errors

    @Test func errorDescriptionsNameTheProblem() {
        #expect(FrameDecodingError.empty.description == "empty frame")
        #expect(
            FrameDecodingError.tooLarge(size: 11, limit: 10).description
                == "frame of 11 bytes exceeds the limit of 10 bytes")
        #expect(FrameDecodingError.malformed("x").description == "malformed frame: x")
    }

    // MARK: Helpers

    /// A publish frame whose encoding is exactly `encodedSize` bytes.
    static func publishFrame(encodedSize: Int) -> WireClientFrame {
        var frame = WireClientFrame()
        frame.requestID = 1
        frame.publish.topic = "inbox/abc"
        var payloadSize = encodedSize - 32
        for _ in 0..<8 {
            frame.publish.payload = Data(repeating: 0xAB, count: payloadSize)
            let size = FrameCodec.encode(frame).count
            if size == encodedSize { break }
            payloadSize += encodedSize - size
        }
        return frame
    }
}
