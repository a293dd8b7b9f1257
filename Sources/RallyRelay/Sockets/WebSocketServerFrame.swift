import NIOCore

extension ByteBuffer {
    /// A final, unmasked binary WebSocket frame holding `message` (RFC 6455
    /// 5.2), as a server sends it: the header and the message in one buffer,
    /// so the socket gets one write where NIO's frame encoder gives two (a
    /// header buffer, then the message). Copying a message of a few hundred
    /// bytes costs less than the second write through the pipeline.
    static func webSocketServerFrame(_ message: ByteBuffer) -> ByteBuffer {
        let length = message.readableBytes
        var frame = ByteBufferAllocator().buffer(capacity: webSocketHeaderBytes(length) + length)
        frame.writeInteger(UInt8(0x82))  // FIN, binary
        switch length {
        case ..<126:
            frame.writeInteger(UInt8(length))
        case ..<65_536:
            frame.writeInteger(UInt8(126))
            frame.writeInteger(UInt16(length))
        default:
            frame.writeInteger(UInt8(127))
            frame.writeInteger(UInt64(length))
        }
        frame.writeImmutableBuffer(message)
        return frame
    }

    /// The header of an unmasked frame of `length` bytes: 2, 4 or 10 bytes.
    static func webSocketHeaderBytes(_ length: Int) -> Int {
        switch length {
        case ..<126: 2
        case ..<65_536: 4
        default: 10
        }
    }
}
