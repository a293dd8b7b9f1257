import Dispatch
import Foundation
import RallyWireLoad

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A deliberately minimal RFC 6455 client over a blocking loopback socket,
/// so tests can send exactly the bytes they want (garbage, lying lengths).
/// Blocking calls run on a private dispatch queue, never on the Swift
/// concurrency pool the relay itself runs on.
final class RawWebSocket: @unchecked Sendable {
    // `fd` is written once in init; all I/O runs serially on `queue`.
    private let fd: Int32
    private let queue = DispatchQueue(label: "raw-websocket")

    struct Message: Equatable {
        let opcode: UInt8
        let payload: Data
    }

    static func connect(
        port: Int, path: String = "/v1/ws", receiveBufferBytes: Int32? = nil
    ) async throws
        -> RawWebSocket
    {
        let socket = try RawWebSocket(port: port, receiveBufferBytes: receiveBufferBytes)
        try await socket.run { try socket.handshake(port: port, path: path) }
        return socket
    }

    /// A plain TCP connection, for tests that speak HTTP themselves.
    static func open(port: Int) throws -> RawWebSocket {
        try RawWebSocket(port: port, receiveBufferBytes: nil)
    }

    private init(port: Int, receiveBufferBytes: Int32?) throws {
        switch LoopbackTCP.connect(port: port, receiveBufferBytes: receiveBufferBytes, receiveTimeoutSeconds: 20) {
        case .success(let connected): fd = connected
        case .failure(let failure): throw POSIXError(POSIXErrorCode(rawValue: failure.errno) ?? .EIO)
        }
    }

    deinit { close(fd) }

    func sendBinary(_ payload: Data) async throws {
        try await sendFrame(opcode: 0x2, payload: payload)
    }

    func sendText(_ text: String) async throws {
        try await sendFrame(opcode: 0x1, payload: Data(text.utf8))
    }

    /// Sends only a frame header announcing `length` bytes, as a hostile
    /// client would before streaming a huge body.
    func sendHeaderOnly(announcing length: UInt64) async throws {
        var header = Data([0x82, 0x80 | 127])
        for shift in stride(from: 56, through: 0, by: -8) { header.append(UInt8((length >> UInt64(shift)) & 0xFF)) }
        header.append(contentsOf: [1, 2, 3, 4])
        try await run { [header] in try self.writeAll(header) }
    }

    /// Writes `bytes` as they are: a frame no well-behaved client sends.
    func sendRaw(_ bytes: Data) async throws {
        try await run { try self.writeAll(bytes) }
    }

    /// A WebSocket ping (control frame) with `payload`.
    func sendPing(_ payload: Data) async throws {
        try await sendFrame(opcode: 0x9, payload: payload)
    }

    /// One binary message in fragments: a binary frame without FIN, then
    /// continuation frames, the last with FIN.
    func sendBinary(inFragments parts: [Data]) async throws {
        for (index, part) in parts.enumerated() {
            try await sendFrame(
                opcode: index == 0 ? 0x2 : 0x0, payload: part, final: index == parts.count - 1)
        }
    }

    /// Writes `request` as it is and reads the response's head (through the
    /// blank line), or nil if the connection ended first.
    func exchangeHTTP(_ request: String) async throws -> String? {
        try await run {
            try self.writeAll(Data(request.utf8))
            return try self.readHead().map { String(decoding: $0, as: UTF8.self) }
        }
    }

    /// Reads the rest of a response's body of `length` bytes.
    func readBody(length: Int) async throws -> Data? {
        try await run { try self.readExactly(length) }
    }

    /// Answers or starts the closing handshake, as a well-behaved client does.
    func sendClose() async throws {
        try await sendFrame(opcode: 0x8, payload: Data([0x03, 0xE8]))
    }

    /// The next message, or nil when the connection ended.
    func receive() async throws -> Message? {
        try await run { try self.readFrame() }
    }

    // Frames are built on the socket's own queue, like its I/O: masking a
    // large payload byte by byte is CPU work that must not hold a thread of
    // the concurrency pool the relay under test runs on (ADR 0024).
    private func sendFrame(opcode: UInt8, payload: Data, final: Bool = true) async throws {
        try await run { try self.writeAll(Self.frame(opcode: opcode, payload: payload, final: final)) }
    }

    /// Several binary messages in one write, as fast as a client can send.
    func sendBinaryBurst(_ payloads: [Data]) async throws {
        try await run {
            try self.writeAll(
                payloads.reduce(into: Data()) { $0.append(Self.frame(opcode: 0x2, payload: $1, final: true)) })
        }
    }

    private static func frame(opcode: UInt8, payload: Data, final: Bool) -> Data {
        var frame = Data([(final ? 0x80 : 0) | opcode])
        let mask: [UInt8] = [0x12, 0x34, 0x56, 0x78]
        switch payload.count {
        case ..<126: frame.append(0x80 | UInt8(payload.count))
        case ..<65536:
            frame.append(0x80 | 126)
            frame.append(contentsOf: [UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)])
        default:
            frame.append(0x80 | 127)
            for shift in stride(from: 56, through: 0, by: -8) { frame.append(UInt8((payload.count >> shift) & 0xFF)) }
        }
        frame.append(contentsOf: mask)
        var masked = [UInt8](payload)
        masked.withUnsafeMutableBufferPointer { bytes in
            for index in bytes.indices { bytes[index] ^= mask[index & 3] }
        }
        frame.append(contentsOf: masked)
        return frame
    }

    private func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try work() }) }
        }
    }

    private func handshake(port: Int, path: String) throws {
        let request =
            "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        try writeAll(Data(request.utf8))
        guard let head = try readHead() else { throw POSIXError(.ECONNRESET) }
        guard String(decoding: head, as: UTF8.self).hasPrefix("HTTP/1.1 101") else { throw POSIXError(.EPROTO) }
    }

    private func readHead() throws -> Data? {
        var head = Data()
        while !head.ends(with: Data("\r\n\r\n".utf8)) {
            guard let byte = try readExactly(1) else { return nil }
            head.append(byte)
        }
        return head
    }

    private func readFrame() throws -> Message? {
        guard let header = try readExactly(2) else { return nil }
        let opcode = header[0] & 0x0F
        var length = UInt64(header[1] & 0x7F)
        if length == 126 {
            guard let bytes = try readExactly(2) else { return nil }
            length = bytes.reduce(0) { $0 << 8 | UInt64($1) }
        } else if length == 127 {
            guard let bytes = try readExactly(8) else { return nil }
            length = bytes.reduce(0) { $0 << 8 | UInt64($1) }
        }
        guard let payload = try readExactly(Int(length)) else { return nil }
        return Message(opcode: opcode, payload: payload)
    }

    private func readExactly(_ count: Int) throws -> Data? {
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: max(1, min(count, 65536)))
        while data.count < count {
            let read = recv(fd, &buffer, min(buffer.count, count - data.count), 0)
            if read == 0 { return nil }
            if read < 0 {
                if errno == ECONNRESET { return nil }
                throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
            }
            data.append(contentsOf: buffer[0..<read])
        }
        return data
    }

    private func writeAll(_ data: Data) throws {
        try data.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let written = send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                if written < 0 { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
                offset += written
            }
        }
    }
}

extension Data {
    fileprivate func ends(with suffix: Data) -> Bool {
        count >= suffix.count && self[(endIndex - suffix.count)...] == suffix
    }
}
