import Foundation
import RallyWire
import Testing

/// The call-room frames (docs/adr/0018): every frame round-trips, and
/// truncated, oversized, malformed and hostile input is a typed error.
@Suite("Room frame codec")
struct RoomFrameCodecTests {
    static let id = String(repeating: "ab", count: 16)
    static let token = String(repeating: "cd", count: 32)

    @Test("client and server frames round-trip")
    func roundTrip() throws {
        let clients: [RoomClientFrame] = [
            .join(token: nil), .join(token: Self.token), .signal(to: Self.id, data: "c2VhbGVk-_"), .leave, .end, .ping,
        ]
        for frame in clients { #expect(try RoomFrameCodec.decodeClient(RoomFrameCodec.encode(frame)) == frame) }
        let servers: [RoomServerFrame] = [
            .joined(participant: Self.id, token: Self.token, peers: [.init(participant: Self.id, state: "suspended")]),
            .peer(.init(participant: Self.id, state: "gone")), .signal(from: Self.id, data: "eA"),
            .roomGone(reason: "peer_left"), .error(code: "room_full", message: "full"), .pong,
        ]
        for frame in servers { #expect(try RoomFrameCodec.decodeServer(RoomFrameCodec.encode(frame)) == frame) }
    }

    @Test("empty, oversized, truncated and malformed bytes are typed errors")
    func badBytes() {
        #expect(throws: RoomFrameError.empty) { try RoomFrameCodec.decodeClient(Data()) }
        let big = Data(repeating: 0x20, count: RoomWireLimits.maxFrameBytes + 1)
        #expect(throws: RoomFrameError.tooLarge(size: big.count, limit: RoomWireLimits.maxFrameBytes)) {
            try RoomFrameCodec.decodeClient(big)
        }
        let whole = RoomFrameCodec.encode(RoomClientFrame.signal(to: Self.id, data: "eA"))
        for cut in [1, whole.count / 2, whole.count - 1] {
            #expect(throws: RoomFrameError.self) { try RoomFrameCodec.decodeClient(whole.prefix(cut)) }
        }
        for text in ["nope", "[]", "null", "{}", #"{"type":1}"#, "\u{FEFF}{", #"{"type":"join""#] {
            #expect(throws: RoomFrameError.self) { try RoomFrameCodec.decodeClient(Data(text.utf8)) }
        }
    }

    @Test("hostile fields: unknown types, ids and tokens of the wrong form, data that is not base64url or too long")
    func hostileFields() {
        let cases: [(String, RoomFrameError)] = [
            (#"{"type":"dance"}"#, .unknownType("dance")),
            (#"{"type":"signal","data":"eA"}"#, .missingField("to")),
            (#"{"type":"signal","to":"\#(Self.id)"}"#, .missingField("data")),
            (#"{"type":"signal","to":"../../x","data":"eA"}"#, .invalidField("to")),
            (#"{"type":"signal","to":"\#(Self.id.uppercased())","data":"eA"}"#, .invalidField("to")),
            (#"{"type":"signal","to":"\#(Self.id)","data":"a+b/"}"#, .invalidField("data")),
            (#"{"type":"signal","to":"\#(Self.id)","data":""}"#, .invalidField("data")),
            (#"{"type":"join","token":"\#(Self.id)"}"#, .invalidField("token")),
        ]
        for (text, error) in cases {
            #expect(throws: error, "\(text)") { try RoomFrameCodec.decodeClient(Data(text.utf8)) }
        }
        let longData = String(repeating: "A", count: RoomWireLimits.maxSignalDataBytes + 1)
        #expect(throws: RoomFrameError.invalidField("data")) {
            try RoomFrameCodec.decodeClient(Data(#"{"type":"signal","to":"\#(Self.id)","data":"\#(longData)"}"#.utf8))
        }
        // A relay that sends too many peers, or peers with bad ids, is refused.
        let peers = (0..<17).map { _ in #"{"participant":"\#(Self.id)","state":"joined"}"# }.joined(separator: ",")
        #expect(throws: RoomFrameError.invalidField("peers")) {
            try RoomFrameCodec.decodeServer(
                Data(
                    #"{"type":"joined","participant":"\#(Self.id)","token":"\#(Self.token)","peers":[\#(peers)]}"#.utf8)
            )
        }
        #expect(throws: RoomFrameError.missingField("reason")) {
            try RoomFrameCodec.decodeServer(Data(#"{"type":"room_gone"}"#.utf8))
        }
    }
}
