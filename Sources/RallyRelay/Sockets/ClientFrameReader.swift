import Foundation
import NIOCore
import NIOWebSocket

/// Reads a client's WebSocket frames (RFC 6455) straight from its socket's
/// bytes, joins fragments and unmasks each message once, into the `Data`
/// the session decodes (docs/adr/0039).
///
/// NIO's frame decoder, its protocol error handler and its aggregator were
/// three handlers every read went through, each with its own pipeline hop,
/// and a `WebSocketFrame` allocated a frame: with NIO's reading they were
/// 15% of the event loops' samples at 100 clients, 11% with this reader.
/// A frame within one read is read where it lies;
/// only a frame split across reads is gathered, and a frame is refused by
/// its header, before any of its bytes are kept, when it would take a
/// message over ``maxMessageBytes``.
struct ClientFrameReader {
    /// What a frame (or the last fragment of a message) tells the session.
    enum Event: Equatable {
        /// A whole binary message, unmasked.
        case binary(Data)
        /// A whole text message: the relay speaks binary only, so its bytes
        /// are not kept.
        case text
        /// A ping with its (unmasked) payload, for the pong.
        case ping(ByteBuffer)
        case pong
        /// The client's close, with its code when it sent one.
        case close(WebSocketErrorCode?)
    }

    /// Why a connection's frames cannot be read on, and the close code
    /// that says so.
    enum Failure: Error, Equatable {
        /// A frame, or the fragments of a message so far, over the limit.
        case messageTooLarge(Int)
        case tooManyFragments
        /// Anything else RFC 6455 says a server must fail the connection
        /// for.
        case protocolViolation(String)

        var closeCode: WebSocketErrorCode {
            switch self {
            case .messageTooLarge, .tooManyFragments: .messageTooLarge
            case .protocolViolation: .protocolError
            }
        }
    }

    /// Control frames carry at most this many payload bytes (RFC 6455 5.5).
    static let maxControlPayload = 125

    let maxMessageBytes: Int
    let maxFragments: Int

    /// Bytes received and not yet read: none between frames, the usual
    /// case, so an idle connection holds no buffer.
    private var unread: ByteBuffer?
    /// A fragmented message's parts so far.
    private var fragments: Fragments?
    private var failed: Failure?

    private struct Fragments {
        var isText: Bool
        var message: Data
        var count: Int
        var bytes: Int
    }

    init(maxMessageBytes: Int, maxFragments: Int) {
        self.maxMessageBytes = maxMessageBytes
        self.maxFragments = maxFragments
    }

    /// Takes what the socket read, to be read by ``next()``.
    mutating func append(_ bytes: ByteBuffer) {
        guard failed == nil, bytes.readableBytes > 0 else { return }
        if var unread, unread.readableBytes > 0 {
            self.unread = nil  // unique again, so the write below does not copy it first
            unread.writeImmutableBuffer(bytes)
            self.unread = unread
        } else {
            unread = bytes
        }
    }

    /// The next event, or nil until more bytes come. Once it has thrown,
    /// it throws the same failure again and reads nothing more.
    mutating func next() throws(Failure) -> Event? {
        if let failed { throw failed }
        do {
            while let event = try readFrame() {
                if let event { return event }
            }
            return nil
        } catch {
            failed = error
            unread = nil
            fragments = nil
            throw error
        }
    }

    /// One frame: nil when it is not all here yet, `.some(nil)` for a
    /// fragment that completes nothing.
    private mutating func readFrame() throws(Failure) -> Event?? {
        guard var buffer = unread else { return nil }
        guard
            let header = try FrameHeader(
                peeking: buffer, maxMessageBytes: maxMessageBytes, maxFragments: maxFragments,
                continuing: fragments.map { ($0.count, $0.bytes) })
        else { return nil }
        guard buffer.readableBytes >= header.headerBytes + header.length else { return nil }
        buffer.moveReaderIndex(forwardBy: header.headerBytes)
        let payload = buffer.readSlice(length: header.length)!
        unread = buffer.readableBytes == 0 ? nil : buffer
        return .some(try event(header, payload))
    }

    private mutating func event(_ header: FrameHeader, _ payload: ByteBuffer) throws(Failure) -> Event? {
        switch header.opcode {
        case 0x0:
            guard var message = fragments else {
                throw .protocolViolation("a continuation frame without a message to continue")
            }
            // Taken out, so appending to its message does not copy it.
            fragments = nil
            message.count += 1
            message.bytes += payload.readableBytes
            if !message.isText { message.message.append(unmasking: payload, key: header.mask) }
            guard header.fin else {
                fragments = message
                return nil
            }
            return message.isText ? .text : .binary(message.message)
        case 0x1, 0x2:
            guard fragments == nil else {
                throw .protocolViolation("a new message before the last one's final fragment")
            }
            let isText = header.opcode == 0x1
            var message = Data()
            if !isText { message.append(unmasking: payload, key: header.mask) }
            guard header.fin else {
                fragments = Fragments(isText: isText, message: message, count: 1, bytes: payload.readableBytes)
                return nil
            }
            return isText ? .text : .binary(message)
        case 0x8:
            let body = payload.unmasked(key: header.mask)
            guard body.readableBytes != 1 else {
                throw .protocolViolation("a close frame's body is a two-byte code and a reason")
            }
            var code = body
            return .close(code.readWebSocketErrorCode())
        case 0x9:
            return .ping(payload.unmasked(key: header.mask))
        case 0xA:
            return .pong
        default:
            throw .protocolViolation("opcode \(header.opcode) is reserved")
        }
    }

    /// A frame's first bytes: what is checked before any payload is kept.
    private struct FrameHeader {
        var fin: Bool
        var opcode: UInt8
        var mask: UInt32
        var length: Int
        var headerBytes: Int

        /// Nil while the header is not all here. `continuing`: the
        /// fragments and bytes of the message a continuation would extend.
        init?(
            peeking buffer: ByteBuffer, maxMessageBytes: Int, maxFragments: Int,
            continuing: (fragments: Int, bytes: Int)?
        ) throws(Failure) {
            let available = buffer.readableBytes
            guard available >= 2 else { return nil }
            let start = buffer.readerIndex
            let first = buffer.getInteger(at: start, as: UInt8.self)!
            let second = buffer.getInteger(at: start + 1, as: UInt8.self)!
            fin = first & 0x80 != 0
            opcode = first & 0x0F
            guard first & 0x70 == 0 else {
                throw .protocolViolation("reserved bits are set, and no extension was agreed")
            }
            guard second & 0x80 != 0 else {
                throw .protocolViolation("a client's frames must be masked")
            }
            let isControl = opcode & 0x08 != 0
            let declared: UInt64
            switch second & 0x7F {
            case 126:
                guard available >= 4 else { return nil }
                declared = UInt64(buffer.getInteger(at: start + 2, as: UInt16.self)!)
                headerBytes = 8
            case 127:
                guard available >= 10 else { return nil }
                declared = buffer.getInteger(at: start + 2, as: UInt64.self)!
                headerBytes = 14
            case let short:
                declared = UInt64(short)
                headerBytes = 6
            }
            if isControl {
                guard fin else { throw .protocolViolation("control frames cannot be fragmented") }
                guard declared <= UInt64(ClientFrameReader.maxControlPayload) else {
                    throw .protocolViolation("control frames carry at most 125 bytes")
                }
            } else {
                // A data frame other than a continuation starts a message
                // (or is refused for interrupting one, once read).
                let sofar = opcode == 0x0 ? continuing : nil
                guard declared <= UInt64(maxMessageBytes - (sofar?.bytes ?? 0)) else {
                    throw .messageTooLarge(maxMessageBytes)
                }
                let parts = sofar?.fragments ?? 0
                guard parts < maxFragments, fin || parts + 1 < maxFragments else {
                    throw .tooManyFragments
                }
            }
            length = Int(declared)
            guard available >= headerBytes else { return nil }
            mask = buffer.getInteger(at: start + headerBytes - 4, as: UInt32.self)!
        }
    }
}

extension Data {
    /// Appends a client frame's payload, unmasked with its key (the four
    /// key bytes in network order, as a big-endian integer): eight bytes at
    /// a time, where a byte at a time made this the read path's largest
    /// loop.
    mutating func append(unmasking payload: ByteBuffer, key: UInt32) {
        let count = payload.readableBytes
        guard count > 0 else { return }
        let start = self.count
        self.count += count
        let word = Swift.withUnsafeBytes(of: (key.bigEndian, key.bigEndian)) { $0.loadUnaligned(as: UInt64.self) }
        withUnsafeMutableBytes { whole in
            let output = UnsafeMutableRawBufferPointer(rebasing: whole[start...])
            payload.withUnsafeReadableBytes { input in
                var index = 0
                while index + 8 <= count {
                    let value = input.loadUnaligned(fromByteOffset: index, as: UInt64.self) ^ word
                    output.storeBytes(of: value, toByteOffset: index, as: UInt64.self)
                    index += 8
                }
                while index < count {
                    output[index] = input[index] ^ UInt8(truncatingIfNeeded: key >> (24 - 8 * (index & 3)))
                    index += 1
                }
            }
        }
    }
}

extension ByteBuffer {
    /// A control frame's payload (at most 125 bytes), unmasked by NIO's own
    /// unmasking: a copy of this slice, not of the read it lies in.
    fileprivate func unmasked(key: UInt32) -> ByteBuffer {
        var body = self
        body.webSocketUnmask(WebSocketMaskingKey(withUnsafeBytes(of: key.bigEndian, Array.init))!)
        return body
    }
}
