import RallyWire

/// The client's side of RFC 6455 framing, as small as a load generator
/// needs: binary frames out (masked, as a client must send them), whole
/// unfragmented frames in. Pure values; the socket shell feeds them bytes.
public enum ClientFrameEncoder {
    /// The header of a masked binary frame carrying `length` bytes, mask
    /// key included: 6, 8 or 14 bytes.
    public static func appendHeader(length: Int, mask: UInt32, opcode: UInt8 = 0x2, to out: inout [UInt8]) {
        out.append(0x80 | opcode)  // FIN
        if length < 126 {
            out.append(0x80 | UInt8(length))
        } else if length <= Int(UInt16.max) {
            out.append(0x80 | 126)
            out.append(UInt8(truncatingIfNeeded: length >> 8))
            out.append(UInt8(truncatingIfNeeded: length))
        } else {
            out.append(0x80 | 127)
            for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: length >> shift)) }
        }
        for shift in stride(from: 24, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: mask >> shift)) }
    }

    /// Appends a masked frame of `payload` (binary unless `opcode` says
    /// otherwise: 0xA answers a ping).
    public static func appendFrame(
        _ payload: some Collection<UInt8>, mask: UInt32, opcode: UInt8 = 0x2, to out: inout [UInt8]
    ) {
        appendHeader(length: payload.count, mask: mask, opcode: opcode, to: &out)
        for (index, byte) in payload.enumerated() { out.append(byte ^ maskByte(mask, index)) }
    }

    /// The mask's byte for payload byte `index`: the key repeats every
    /// four bytes, most significant first.
    @inline(__always)
    static func maskByte(_ mask: UInt32, _ index: Int) -> UInt8 {
        UInt8(truncatingIfNeeded: mask >> (24 - 8 * UInt32(index & 3)))
    }
}

/// A frame the server sent.
public struct ServerFrame: Equatable, Sendable {
    public enum Kind: Equatable, Sendable {
        case binary
        case text
        case ping
        case pong
        /// The server is closing; `code` is 1005 when it gave none.
        case close(code: UInt16)
    }
    public var kind: Kind
    public var payload: [UInt8]
}

/// Why the server's bytes are not frames this client takes.
public enum ServerFrameError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A server must not mask its frames (RFC 6455 5.1).
    case masked
    /// RSV1-3 set without an extension that defines them.
    case reservedBits
    /// A fragment (FIN clear or a continuation): the relay sends whole
    /// messages, so this client does not reassemble.
    case fragmented
    case unknownOpcode(UInt8)
    /// A control frame longer than 125 bytes (RFC 6455 5.5).
    case oversizedControlFrame(Int)
    /// A frame longer than `ServerFrameReader.maxPayloadBytes`.
    case tooLarge(UInt64)

    public var description: String {
        switch self {
        case .masked: "the server sent a masked frame"
        case .reservedBits: "the server set reserved bits"
        case .fragmented: "the server sent a fragmented message"
        case .unknownOpcode(let code): "the server sent unknown opcode \(code)"
        case .oversizedControlFrame(let size): "the server sent a \(size)-byte control frame (at most 125)"
        case .tooLarge(let size): "the server sent a \(size)-byte frame (at most \(ServerFrameReader.maxPayloadBytes))"
        }
    }
}

/// Cuts whole frames out of the bytes a socket reads, in order. Bytes of
/// a frame still arriving are kept until the rest comes; a frame's length
/// is checked against the limit before anything of it is kept.
public struct ServerFrameReader: Sendable {
    /// The largest frame this client takes: the relay's largest frame.
    public static let maxPayloadBytes = WireLimits.maxFrameBytes
    private var buffer: [UInt8] = []
    private var start = 0

    public init() {}

    /// Bytes read but not yet returned as frames.
    public var pendingBytes: Int { buffer.count - start }

    /// Appends what the socket read. Bytes of frames already returned are
    /// dropped first, so a ``FrameSpan`` stays valid until the next append.
    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        if start == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            start = 0
        } else if start > 64 * 1024 {
            buffer.removeFirst(start)
            start = 0
        }
        buffer.append(contentsOf: bytes)
    }

    public mutating func append(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { append($0) }
    }

    /// A whole frame as the reader holds it: its kind, and where its
    /// payload lies among the reader's bytes (``withPayload(of:_:)``) until
    /// the next append. The load generator reads acks and
    /// deliveries in place: a copy of each payload was a heap allocation
    /// per frame, in a process that shares the relay's cores.
    public struct FrameSpan: Equatable, Sendable {
        public var kind: ServerFrame.Kind
        public var payload: Range<Int>
    }

    /// The next whole frame, copied out, or nil until more bytes come.
    public mutating func next() throws(ServerFrameError) -> ServerFrame? {
        guard let span = try nextSpan() else { return nil }
        return ServerFrame(kind: span.kind, payload: Array(buffer[span.payload]))
    }

    /// The bytes of a span ``nextSpan()`` returned since the last append.
    public func withPayload<Result>(
        of span: FrameSpan, _ body: (UnsafeRawBufferPointer) throws -> Result
    ) rethrows -> Result {
        try buffer.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[span.payload])) }
    }

    /// The next whole frame, left in place, or nil until more bytes come.
    public mutating func nextSpan() throws(ServerFrameError) -> FrameSpan? {
        let available = buffer.count - start
        guard available >= 2 else { return nil }
        let first = buffer[start]
        let second = buffer[start + 1]
        guard second & 0x80 == 0 else { throw .masked }
        guard first & 0x70 == 0 else { throw .reservedBits }
        let opcode = first & 0x0F
        let isFinal = first & 0x80 != 0
        var headerLength = 2
        var length = UInt64(second & 0x7F)
        if length == 126 {
            guard available >= 4 else { return nil }
            length = UInt64(buffer[start + 2]) << 8 | UInt64(buffer[start + 3])
            headerLength = 4
        } else if length == 127 {
            guard available >= 10 else { return nil }
            length = 0
            for index in 0..<8 { length = length << 8 | UInt64(buffer[start + 2 + index]) }
            headerLength = 10
        }
        var kind: ServerFrame.Kind
        switch opcode {
        case 0x0: throw .fragmented
        case 0x1: kind = .text
        case 0x2: kind = .binary
        case 0x8: kind = .close(code: 1005)
        case 0x9: kind = .ping
        case 0xA: kind = .pong
        default: throw .unknownOpcode(opcode)
        }
        guard isFinal else { throw .fragmented }
        if opcode >= 0x8, length > 125 { throw .oversizedControlFrame(Int(length)) }
        guard length <= UInt64(Self.maxPayloadBytes) else { throw .tooLarge(length) }
        let total = headerLength + Int(length)
        guard available >= total else { return nil }
        let payload = (start + headerLength)..<(start + total)
        start += total
        if case .close = kind, payload.count >= 2 {
            kind = .close(code: UInt16(buffer[payload.lowerBound]) << 8 | UInt16(buffer[payload.lowerBound + 1]))
        }
        return FrameSpan(kind: kind, payload: payload)
    }
}
