import Foundation
import NIOCore
import NIOWebSocket
import RallyTestSupport
import RallyWireLoad
import Testing

@testable import RallyRelay

/// The relay frames its binary messages itself (header and message in one
/// buffer); a client's RFC 6455 reader, written apart from it, reads them.
@Suite("WebSocket server frames")
struct WebSocketServerFrameTests {
    @Test(
        "each length encoding, at its edges, is a final unmasked binary frame that a client reads back whole, and the relay finds its message in it",
        arguments: [0, 1, 125, 126, 127, 65_535, 65_536, 266_240])
    func lengthEncodings(length: Int) throws {
        let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let message = ByteBuffer(bytes: bytes)
        let frame = ByteBuffer.webSocketServerFrame(length: length) { writer in
            bytes.withUnsafeBytes { writer.bytes($0) }
        }
        let headerBytes = length < 126 ? 2 : length < 65_536 ? 4 : 10
        #expect(frame.readableBytes == headerBytes + length)
        #expect(ByteBuffer.webSocketHeaderBytes(length) == headerBytes)
        #expect(frame.getInteger(at: frame.readerIndex, as: UInt8.self) == 0x82)
        // The second byte's top bit is the mask bit: a server never sets it.
        let second = try #require(frame.getInteger(at: frame.readerIndex + 1, as: UInt8.self))
        #expect(second & 0x80 == 0)
        var reader = ServerFrameReader()
        reader.append(Array(frame.readableBytesView))
        let read = try #require(try reader.next())
        #expect(read.kind == .binary)
        #expect(read.payload == Array(message.readableBytesView))
        #expect(reader.pendingBytes == 0)
        // A channel that frames messages itself gets the message back.
        #expect(frame.webSocketServerMessage == message)
    }

    @Test("a frame that writes more than its header says stops the process instead of sending a corrupt frame")
    func overlongFrameTraps() async {
        await #expect(processExitsWith: .failure) {
            _ = ByteBuffer.webSocketServerFrame(length: 2) { writer in
                for byte: UInt8 in [1, 2, 3] { writer.byte(byte) }
            }
        }
    }

    @Test("the message of a frame read past its first bytes is found from where the frame starts to be read")
    func messageOfAFrameReadPastItsStart() throws {
        var buffer = ByteBuffer(bytes: [9, 9])
        buffer.writeImmutableBuffer(
            ByteBuffer.webSocketServerFrame(length: 3) { writer in
                for byte: UInt8 in [1, 2, 3] { writer.byte(byte) }
            })
        buffer.moveReaderIndex(forwardBy: 2)
        #expect(Array(buffer.webSocketServerMessage.readableBytesView) == [1, 2, 3])
    }
}
