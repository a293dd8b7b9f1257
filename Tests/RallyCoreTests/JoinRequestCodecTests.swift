import Foundation
import RallyCrypto
import RallyTestSupport
import RallyWire
import Testing

@testable import RallyCore

@Suite("JoinRequestCodec: what an invite inbox receives")
struct JoinRequestCodecTests {
    static let codec = JoinRequestCodec()

    static let fixture = makeRequest()

    static func request() -> WireJoinRequest { fixture }

    static func makeRequest() -> WireJoinRequest {
        let issuer = Identity(displayName: "olivia")
        var payload = WireInvitePayload()
        payload.inviteTag = Data(repeating: 1, count: 16)
        payload.issuer = issuer.publicIdentity.wireBundle
        payload.groupReference = Data(repeating: 2, count: 60)
        payload.joinInboxID = Identity(displayName: "invites").inboxID.rawValue
        payload.name = "Picnic"
        var request = WireJoinRequest()
        request.invite = Invite.sign(payload, by: issuer)
        request.requestID = Data(repeating: 3, count: 16)
        return request
    }

    @Test func roundTripThroughTheRegistryPushesAndHasAFallback() throws {
        let content = try CodecRegistry.standard.encode(Self.request(), with: Self.codec)
        #expect(content.shouldPush)
        #expect(content.fallback == "Asked to join with an invite")
        let decoded = CodecRegistry.standard.decode(content)
        #expect(decoded.isKnown)
        #expect(decoded.value as? WireJoinRequest == Self.request())
    }

    @Test func everyTruncationIsATypedErrorOrAShorterMessage() throws {
        let full = try Self.codec.encode(Self.request())
        for length in 0..<full.content.count {
            var cut = full
            cut.content = full.content.prefix(length)
            // A protobuf prefix may parse (fields simply missing); it must
            // never crash, and what parses is not the original request.
            if let parsed = try? Self.codec.decode(cut) { #expect(parsed != Self.request()) }
        }
    }

    @Test func oversizedIsRefusedBeforeParsing() throws {
        var content = try Self.codec.encode(Self.request())
        content.content = Data(repeating: 0xFF, count: JoinRequestCodec.maxBodyBytes + 1)
        #expect(
            throws: ContentError.tooLarge(size: JoinRequestCodec.maxBodyBytes + 1, limit: JoinRequestCodec.maxBodyBytes)
        ) {
            try Self.codec.decode(content)
        }
    }

    @Test func garbageIsMalformed() throws {
        var content = try Self.codec.encode(Self.request())
        for garbage in [Data([0xFF]), Data([0x0A, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F]), Data(repeating: 0x0A, count: 100)] {
            content.content = garbage
            #expect(throws: ContentError.self) { try Self.codec.decode(content) }
        }
    }

    @Test func hostileNestingAndBitFlipsNeverCrash() throws {
        let full = try Self.codec.encode(Self.request())
        var generator = SeededGenerator(seed: 0x5EED_0004)
        for _ in 0..<2000 {
            var flipped = full
            var bytes = [UInt8](full.content)
            let index = Int.random(in: 0..<bytes.count, using: &generator)
            bytes[index] ^= UInt8(1 << Int.random(in: 0..<8, using: &generator))
            flipped.content = Data(bytes)
            _ = try? Self.codec.decode(flipped)
        }
        // Deeply nested length-delimited fields.
        var nested = Data()
        for _ in 0..<500 { nested = Data([0x0A]) + Data([UInt8(min(nested.count, 127))]) + nested.prefix(127) }
        var content = full
        content.content = nested
        _ = try? Self.codec.decode(content)
    }
}
