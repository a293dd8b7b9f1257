import Foundation
import NIOCore
import NIOWebSocket
import RallyTestSupport
import Testing

@testable import RallyRelay

/// A client frame as RFC 6455 lays it out, built apart from the reader:
/// any header bits, any length encoding, masked or not.
private struct ClientFrame {
    var fin = true
    var reservedBits: UInt8 = 0
    var opcode: UInt8
    var payload: [UInt8]
    var mask: [UInt8]? = [0x37, 0xFA, 0x21, 0x3D]
    /// Forces the 16- or 64-bit length encoding for a short payload.
    var lengthBytes: Int? = nil
    /// Declares this length instead of the payload's.
    var declaredLength: UInt64? = nil

    var bytes: [UInt8] {
        var out: [UInt8] = [(fin ? 0x80 : 0) | (reservedBits << 4) | opcode]
        let maskBit: UInt8 = mask == nil ? 0 : 0x80
        let length = declaredLength ?? UInt64(payload.count)
        switch lengthBytes ?? (length < 126 ? 0 : length < 65_536 ? 2 : 8) {
        case 0:
            out.append(maskBit | UInt8(length))
        case 2:
            out.append(maskBit | 126)
            out += [UInt8(length >> 8), UInt8(length & 0xFF)]
        default:
            out.append(maskBit | 127)
            out += (0..<8).reversed().map { UInt8((length >> (8 * UInt64($0))) & 0xFF) }
        }
        guard let mask else { return out + payload }
        out += mask
        out += payload.enumerated().map { $0.element ^ mask[$0.offset % 4] }
        return out
    }

    static func binary(_ payload: [UInt8], fin: Bool = true) -> ClientFrame {
        ClientFrame(fin: fin, opcode: 0x2, payload: payload)
    }
}

private func reader(max: Int = 1 << 20, fragments: Int = 1024) -> ClientFrameReader {
    ClientFrameReader(maxMessageBytes: max, maxFragments: fragments)
}

/// Feeds `chunks` one after another and collects every event, or the
/// failure that ended them.
private func read(
    _ chunks: [[UInt8]], into reader: inout ClientFrameReader
) -> (events: [ClientFrameReader.Event], failure: ClientFrameReader.Failure?) {
    var events: [ClientFrameReader.Event] = []
    for chunk in chunks {
        reader.append(ByteBuffer(bytes: chunk))
        do {
            while let event = try reader.next() { events.append(event) }
        } catch {
            return (events, error)
        }
    }
    return (events, nil)
}

private func read(
    _ bytes: [UInt8], max: Int = 1 << 20
) -> (
    events: [ClientFrameReader.Event], failure: ClientFrameReader.Failure?
) {
    var reader = reader(max: max)
    return read([bytes], into: &reader)
}

@Suite("A client's WebSocket frames, read by the relay")
struct ClientFrameReaderTests {
    @Test(
        "a masked binary frame in each length encoding, at its edges, reads back as its message",
        arguments: [0, 1, 125, 126, 127, 65_535, 65_536, 266_240])
    func lengthEncodings(length: Int) {
        var random = SeededGenerator(seed: UInt64(length) &+ 7)
        let payload = (0..<length).map { _ in UInt8.random(in: .min ... .max, using: &random) }
        var frame = ClientFrame.binary(payload)
        frame.mask = (0..<4).map { _ in UInt8.random(in: .min ... .max, using: &random) }
        let result = read(frame.bytes, max: 266_240)
        #expect(result.failure == nil)
        #expect(result.events == [.binary(Data(payload))])
    }

    @Test("a frame split at any byte comes out once, whole, and nothing before its last byte arrives")
    func splitAnywhere() {
        let payload = (0..<300).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let bytes = ClientFrame.binary(payload).bytes
        for split in 1..<bytes.count {
            var reader = reader()
            let first = read([Array(bytes[..<split])], into: &reader)
            #expect(first.events.isEmpty && first.failure == nil, "split at \(split)")
            let rest = read([Array(bytes[split...])], into: &reader)
            #expect(rest.events == [.binary(Data(payload))], "split at \(split)")
        }
        var reader = reader()
        let byteByByte = read(bytes.map { [$0] }, into: &reader)
        #expect(byteByByte.events == [.binary(Data(payload))])
    }

    @Test("frames that arrive in one read come out in order, control frames among them")
    func severalInOneRead() {
        let bytes =
            ClientFrame.binary([1]).bytes + ClientFrame(opcode: 0x9, payload: [9, 9]).bytes
            + ClientFrame.binary([2, 2]).bytes + ClientFrame(opcode: 0xA, payload: []).bytes
            + ClientFrame(opcode: 0x8, payload: [0x03, 0xE8]).bytes
        let result = read(bytes)
        #expect(result.failure == nil)
        #expect(
            result.events == [
                .binary(Data([1])), .ping(ByteBuffer(bytes: [9, 9])), .binary(Data([2, 2])), .pong,
                .close(.normalClosure),
            ])
    }

    @Test("fragments join into one message, each with its own mask; a ping between them is answered in between")
    func fragments() {
        var first = ClientFrame.binary([1, 2, 3], fin: false)
        first.mask = [1, 2, 3, 4]
        var middle = ClientFrame(fin: false, opcode: 0x0, payload: Array(4...20))
        middle.mask = [0xFF, 0, 0xAA, 0x55]
        let last = ClientFrame(opcode: 0x0, payload: [21])
        let ping = ClientFrame(opcode: 0x9, payload: [7])
        let result = read(first.bytes + ping.bytes + middle.bytes + last.bytes)
        #expect(result.failure == nil)
        #expect(result.events == [.ping(ByteBuffer(bytes: [7])), .binary(Data(1...21))])
    }

    @Test("a text message is reported without its bytes, whole or in fragments")
    func text() {
        let whole = ClientFrame(opcode: 0x1, payload: Array("hello".utf8))
        let start = ClientFrame(fin: false, opcode: 0x1, payload: Array("he".utf8))
        let end = ClientFrame(opcode: 0x0, payload: Array("llo".utf8))
        let result = read(whole.bytes + start.bytes + end.bytes + ClientFrame.binary([5]).bytes)
        #expect(result.events == [.text, .text, .binary(Data([5]))])
    }

    @Test("a close carries the client's code, or none for an empty body")
    func close() {
        #expect(read(ClientFrame(opcode: 0x8, payload: [0x03, 0xF1, 0x41]).bytes).events == [.close(.messageTooLarge)])
        #expect(read(ClientFrame(opcode: 0x8, payload: []).bytes).events == [.close(nil)])
    }

    @Test("a frame over the limit is refused by its header alone, before any of its payload arrives")
    func overTheLimitByItsHeader() {
        for length in [1_025, 65_536, 1 << 40] {
            var frame = ClientFrame.binary([])
            frame.declaredLength = UInt64(length)
            // The header and mask only: no payload byte was sent.
            let result = read(frame.bytes, max: 1_024)
            #expect(result.failure == .messageTooLarge(1_024), "declared \(length)")
            #expect(result.failure?.closeCode == .messageTooLarge)
        }
        var hostile = ClientFrame.binary([])
        hostile.declaredLength = UInt64.max
        #expect(read(hostile.bytes).failure == .messageTooLarge(1 << 20))
        let atTheLimit = ClientFrame.binary([UInt8](repeating: 1, count: 1_024))
        #expect(read(atTheLimit.bytes, max: 1_024).events == [.binary(Data(repeating: 1, count: 1_024))])
    }

    @Test("fragments adding up to more than the limit are refused at the one that crosses it")
    func fragmentsOverTheLimit() {
        let first = ClientFrame.binary([UInt8](repeating: 0, count: 600), fin: false)
        let second = ClientFrame(fin: false, opcode: 0x0, payload: [UInt8](repeating: 0, count: 424))
        let crossing = ClientFrame(opcode: 0x0, payload: [1])
        let result = read(first.bytes + second.bytes + crossing.bytes, max: 1_024)
        #expect(result.events.isEmpty)
        #expect(result.failure == .messageTooLarge(1_024))
        let fits = ClientFrame(opcode: 0x0, payload: [])
        #expect(read(first.bytes + second.bytes + fits.bytes, max: 1_024).events.count == 1)
    }

    @Test("a message in more fragments than the limit is refused; one in exactly that many is read")
    func tooManyFragments() {
        func message(fragments: Int) -> [UInt8] {
            var bytes = ClientFrame.binary([0], fin: fragments == 1).bytes
            for index in 1..<max(fragments, 1) {
                bytes += ClientFrame(fin: index == fragments - 1, opcode: 0x0, payload: [UInt8(index & 0xFF)]).bytes
            }
            return bytes
        }
        var atLimit = reader(fragments: 8)
        #expect(read([message(fragments: 8)], into: &atLimit).events.count == 1)
        var over = reader(fragments: 8)
        let result = read([message(fragments: 9)], into: &over)
        #expect(result.events.isEmpty)
        #expect(result.failure == .tooManyFragments)
        #expect(result.failure?.closeCode == .messageTooLarge)
    }

    @Test("every frame RFC 6455 says fails the connection is a protocol violation (1002)")
    func protocolViolations() {
        var unmasked = ClientFrame.binary([1, 2])
        unmasked.mask = nil
        var reserved = [ClientFrame]()
        for bits: UInt8 in [1, 2, 4, 7] {
            var frame = ClientFrame.binary([1])
            frame.reservedBits = bits
            reserved.append(frame)
        }
        let reservedOpcodes = [3, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF].map {
            ClientFrame(opcode: UInt8($0), payload: [1])
        }
        var longPing = ClientFrame(opcode: 0x9, payload: [UInt8](repeating: 0, count: 126))
        longPing.lengthBytes = 2
        let cases: [(String, [UInt8])] =
            [
                ("unmasked", unmasked.bytes),
                ("continuation without a message", ClientFrame(opcode: 0x0, payload: [1]).bytes),
                (
                    "new message before the last one ended",
                    ClientFrame.binary([1], fin: false).bytes + ClientFrame.binary([2]).bytes
                ),
                ("fragmented ping", ClientFrame(fin: false, opcode: 0x9, payload: []).bytes),
                ("ping over 125 bytes", longPing.bytes),
                ("close with a one-byte body", ClientFrame(opcode: 0x8, payload: [3]).bytes),
            ] + reserved.map { ("reserved bits \($0.reservedBits)", $0.bytes) }
            + reservedOpcodes.map { ("opcode \($0.opcode)", $0.bytes) }
        for (name, bytes) in cases {
            let result = read(bytes)
            guard case .protocolViolation? = result.failure else {
                Issue.record("\(name): \(String(describing: result.failure)), events \(result.events)")
                continue
            }
            #expect(result.failure?.closeCode == .protocolError, "\(name)")
        }
    }

    @Test("after a failure nothing more is read, and the same failure is thrown again")
    func staysFailed() {
        var reader = reader()
        var unmasked = ClientFrame.binary([1])
        unmasked.mask = nil
        let first = read([unmasked.bytes], into: &reader)
        let again = read([ClientFrame.binary([2]).bytes], into: &reader)
        #expect(first.failure != nil)
        #expect(again.events.isEmpty)
        #expect(again.failure == first.failure)
    }

    @Test("random messages, fragments, masks and pings, cut at random points, read back exactly")
    func randomStreams() {
        var random = SeededGenerator(seed: 0xF00D)
        for round in 0..<200 {
            var bytes: [UInt8] = []
            var expected: [ClientFrameReader.Event] = []
            for _ in 0..<Int.random(in: 1...6, using: &random) {
                let length = [0, 1, 7, 125, 126, 700, 70_000].randomElement(using: &random)!
                let message = (0..<length).map { _ in UInt8.random(in: .min ... .max, using: &random) }
                let parts = Int.random(in: 1...4, using: &random)
                var cut = (0..<parts - 1).map { _ in Int.random(in: 0...length, using: &random) }.sorted()
                cut = [0] + cut + [length]
                for part in 0..<parts {
                    var frame = ClientFrame(
                        fin: part == parts - 1, opcode: part == 0 ? 0x2 : 0x0,
                        payload: Array(message[cut[part]..<cut[part + 1]]))
                    frame.mask = (0..<4).map { _ in UInt8.random(in: .min ... .max, using: &random) }
                    bytes += frame.bytes
                    // The message is whole once its last fragment is read.
                    if part == parts - 1 { expected.append(.binary(Data(message))) }
                    if Bool.random(using: &random) {
                        bytes += ClientFrame(opcode: 0x9, payload: [UInt8(part)]).bytes
                        expected.append(.ping(ByteBuffer(bytes: [UInt8(part)])))
                    }
                }
            }
            var chunks: [[UInt8]] = []
            var start = 0
            while start < bytes.count {
                let end = min(bytes.count, start + Int.random(in: 1...9_000, using: &random))
                chunks.append(Array(bytes[start..<end]))
                start = end
            }
            var reader = reader()
            let result = read(chunks, into: &reader)
            #expect(result.failure == nil, "round \(round)")
            #expect(result.events == expected, "round \(round)")
        }
    }

    @Test("garbage and damaged streams end in events or a typed failure, never in a crash or a message over the limit")
    func hostileBytes() {
        var random = SeededGenerator(seed: 0xBAD)
        // Messages close under the limit, so a damaged length byte can
        // claim more than the limit with the bytes for it present.
        let limit = 150
        let valid =
            ClientFrame.binary(Array(0..<100)).bytes + ClientFrame(opcode: 0x9, payload: [1]).bytes
            + ClientFrame.binary([UInt8](repeating: 3, count: 140)).bytes
            + ClientFrame.binary([UInt8](repeating: 4, count: 140)).bytes
        for _ in 0..<2_000 {
            var bytes: [UInt8]
            if Bool.random(using: &random) {
                bytes = (0..<Int.random(in: 0...64, using: &random)).map { _ in
                    UInt8.random(in: .min ... .max, using: &random)
                }
            } else {
                bytes = valid
                for _ in 0..<Int.random(in: 1...4, using: &random) {
                    bytes[Int.random(in: 0..<bytes.count, using: &random)] ^= UInt8.random(
                        in: 1 ... .max, using: &random)
                }
            }
            var reader = reader(max: limit, fragments: 16)
            let result = read([bytes], into: &reader)
            for case .binary(let message) in result.events {
                #expect(message.count <= limit)
            }
        }
    }
}

/// A client's message is unmasked straight into the `Data` the session
/// decodes; NIO's own unmasking is the reference.
@Suite("WebSocket client messages")
struct WebSocketUnmaskingTests {
    @Test("every length from 0 to 40 bytes and a large one unmask as NIO unmasks them, with random keys")
    func matchesNIO() {
        var random = SeededGenerator(seed: 0xA5C3)
        for length in Array(0...40) + [70_001] {
            let keyBytes = (0..<4).map { _ in UInt8.random(in: .min ... .max, using: &random) }
            let key = keyBytes.reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            let bytes = (0..<length).map { _ in UInt8.random(in: .min ... .max, using: &random) }
            var reference = ByteBuffer(bytes: bytes)
            reference.webSocketUnmask(WebSocketMaskingKey(keyBytes)!)
            var unmasked = Data([0xEE])
            unmasked.append(unmasking: ByteBuffer(bytes: bytes), key: key)
            #expect(unmasked == Data([0xEE]) + Data(reference.readableBytesView), "length \(length)")
        }
    }
}
