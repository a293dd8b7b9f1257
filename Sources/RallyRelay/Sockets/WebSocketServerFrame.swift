import NIOCore
import RallyWire

extension ByteBuffer {
    /// A final, unmasked binary WebSocket frame (RFC 6455 5.2), as a server
    /// sends it, whose message `write` writes: exactly `length` bytes, into
    /// memory reserved for exactly the frame (``FrameBytesWriter``). The
    /// header and the message share one buffer, so the socket gets one
    /// write where NIO's frame encoder gives two (a header buffer, then the
    /// message), and the relay's own frames are encoded behind their
    /// header in the first place (``HotFrameEncoding``).
    static func webSocketServerFrame(length: Int, _ write: (inout FrameBytesWriter) -> Void) -> ByteBuffer {
        let total = webSocketHeaderBytes(length) + length
        var frame = ByteBufferAllocator().buffer(capacity: total)
        frame.writeWithUnsafeMutableBytes(minimumWritableBytes: total) { memory in
            var writer = FrameBytesWriter(UnsafeMutableRawBufferPointer(rebasing: memory[..<total]))
            writer.webSocketServerHeader(length: length)
            write(&writer)
            precondition(writer.count == total, "a server frame's message is not the length its header says")
            return total
        }
        return frame
    }

    /// A server frame as a WebSocket frame, encoded by SwiftProtobuf: any
    /// frame but the ack and the live envelope.
    static func webSocketServerFrame(encoding frame: WireServerFrame) -> ByteBuffer {
        let message = FrameCodec.encode(frame)
        return webSocketServerFrame(length: message.count) { writer in message.withUnsafeBytes { writer.bytes($0) } }
    }

    /// The header of an unmasked frame of `length` bytes: 2, 4 or 10 bytes.
    static func webSocketHeaderBytes(_ length: Int) -> Int {
        switch length {
        case ..<126: 2
        case ..<65_536: 4
        default: 10
        }
    }

    /// The message of a frame ``webSocketServerFrame(length:_:)`` made,
    /// sharing its bytes: for a channel that frames messages itself (a
    /// test's embedded channel, or a socket before its upgrade completed).
    var webSocketServerMessage: ByteBuffer {
        let second = getInteger(at: readerIndex + 1, as: UInt8.self) ?? 0
        let headerBytes =
            switch second & 0x7F {
            case 127: 10
            case 126: 4
            default: 2
            }
        return getSlice(at: readerIndex + headerBytes, length: readableBytes - headerBytes) ?? ByteBuffer()
    }
}
