import Crypto
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Why a load run stopped.
public enum WireLoadError: Error, Equatable, Sendable, CustomStringConvertible {
    case connectFailed(port: Int, errno: Int32)
    case handshakeRefused(String)
    case socket(String, errno: Int32)
    case closedByRelay(code: UInt16?)
    case framing(ServerFrameError)
    /// The relay answered with an error frame.
    case refused(code: String, message: String)
    /// A frame that is not what this point of the protocol expects.
    case unexpected(String)
    /// Nothing came from the relay for `seconds`.
    case stalled(seconds: Int, detail: String)

    public var description: String {
        switch self {
        case .connectFailed(let port, let code):
            "could not connect to 127.0.0.1:\(port): \(String(cString: strerror(code)))"
        case .handshakeRefused(let status): "the relay refused the WebSocket upgrade: \(status)"
        case .socket(let call, let code): "\(call) failed: \(String(cString: strerror(code)))"
        case .closedByRelay(let code): "the relay closed the connection" + (code.map { " (close code \($0))" } ?? "")
        case .framing(let error): error.description
        case .refused(let code, let message): "the relay refused: \(code): \(message)"
        case .unexpected(let what): "unexpected frame: \(what)"
        case .stalled(let seconds, let detail): "nothing from the relay for \(seconds) s (\(detail))"
        }
    }
}

/// One WebSocket connection to a relay on a plain TCP socket, owned by one
/// thread: blocking reads while connecting and authenticating, reads of
/// what is there once the run polls it.
final class LoadSocket {
    let fd: Int32
    private(set) var reader = ServerFrameReader()
    private var readBuffer = [UInt8](repeating: 0, count: 64 * 1024)

    /// Longest wait for one frame while setting up.
    static let setupTimeoutMilliseconds: Int32 = 10_000

    private init(fd: Int32) { self.fd = fd }

    deinit { close(fd) }

    /// Connects to `127.0.0.1:port` and upgrades `path` to a WebSocket.
    static func open(port: Int, path: String) throws(WireLoadError) -> LoadSocket {
        let fd: Int32
        switch LoopbackTCP.connect(port: port) {
        case .success(let connected): fd = connected
        case .failure(let failure) where failure.call == "connect":
            throw .connectFailed(port: port, errno: failure.errno)
        case .failure(let failure): throw .socket(failure.call, errno: failure.errno)
        }
        let socket = LoadSocket(fd: fd)
        // Like any latency-minded client: a small frame goes out at once.
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        try socket.upgrade(port: port, path: path)
        return socket
    }

    private func upgrade(port: Int, path: String) throws(WireLoadError) {
        let key = Data((0..<16).map { _ in UInt8.random(in: .min ... .max) }).base64EncodedString()
        let request =
            "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + "Sec-WebSocket-Key: \(key)\r\nSec-WebSocket-Version: 13\r\n\r\n"
        try send(Array(request.utf8))
        var response: [UInt8] = []
        let end: [UInt8] = Array("\r\n\r\n".utf8)
        while true {
            let count = try readSome(what: "the upgrade response")
            response.append(contentsOf: readBuffer[0..<count])
            if let range = response.firstRange(of: end) {
                let head = String(decoding: response[..<range.lowerBound], as: UTF8.self)
                let lines = head.split(separator: "\r\n")
                guard let status = lines.first, status.hasPrefix("HTTP/1.1 101") else {
                    throw .handshakeRefused(String(lines.first ?? "no status line"))
                }
                let expected = Data(Insecure.SHA1.hash(data: Data((key + Self.webSocketGUID).utf8)))
                    .base64EncodedString()
                let accepted = lines.dropFirst().contains { line in
                    let parts = line.split(separator: ":", maxSplits: 1)
                    return parts.count == 2 && parts[0].lowercased() == "sec-websocket-accept"
                        && parts[1].trimmingCharacters(in: .whitespaces) == expected
                }
                guard accepted else { throw .handshakeRefused("no matching Sec-WebSocket-Accept") }
                reader.append(Array(response[range.upperBound...]))
                return
            }
            guard response.count < 16 * 1024 else { throw .handshakeRefused("an upgrade response over 16 KiB") }
        }
    }

    #if canImport(Glibc)
        private static let systemWrite = Glibc.write
    #else
        private static let systemWrite = Darwin.write
    #endif

    private static let webSocketGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    /// Writes all of `bytes` (the socket blocks while its buffer is full).
    func send(_ bytes: [UInt8]) throws(WireLoadError) {
        let failure: Int32? = bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Self.systemWrite(fd, buffer.baseAddress! + offset, buffer.count - offset)
                if written > 0 {
                    offset += written
                } else if written < 0, errno == EINTR {
                    continue
                } else {
                    return errno
                }
            }
            return nil
        }
        if let failure { throw .socket("write", errno: failure) }
    }

    /// Waits up to ``setupTimeoutMilliseconds`` for bytes and reads them
    /// into `readBuffer`; returns how many.
    private func readSome(what: String) throws(WireLoadError) -> Int {
        var wait = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&wait, 1, Self.setupTimeoutMilliseconds) > 0 else {
            throw .stalled(seconds: Int(Self.setupTimeoutMilliseconds / 1000), detail: "waiting for \(what)")
        }
        let count = readBuffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if count == 0 { throw .closedByRelay(code: nil) }
        guard count > 0 else { throw .socket("read", errno: errno) }
        return count
    }

    /// The next frame, waiting for it (setup only).
    func nextFrame(what: String) throws(WireLoadError) -> ServerFrame {
        while true {
            if let frame = try frameOrNil() { return frame }
            let count = try readSome(what: what)
            readBuffer.withUnsafeBytes { reader.append(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
        }
    }

    /// Reads what the socket has without waiting. False at end of stream.
    func readAvailable() throws(WireLoadError) -> Bool {
        let count = readBuffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
        if count == 0 { return false }
        if count < 0 {
            guard errno == EAGAIN || errno == EINTR else { throw .socket("read", errno: errno) }
            return true
        }
        readBuffer.withUnsafeBytes { reader.append(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
        return true
    }

    /// A whole frame already read, if there is one.
    func frameOrNil() throws(WireLoadError) -> ServerFrame? {
        do {
            return try reader.next()
        } catch {
            throw .framing(error)
        }
    }

    /// A whole frame already read, left in the reader until the next read.
    func frameSpanOrNil() throws(WireLoadError) -> ServerFrameReader.FrameSpan? {
        do {
            return try reader.nextSpan()
        } catch {
            throw .framing(error)
        }
    }

    func withPayload<Result>(of span: ServerFrameReader.FrameSpan, _ body: (UnsafeRawBufferPointer) -> Result) -> Result
    {
        reader.withPayload(of: span, body)
    }

    /// A span's frame, copied out: for the frames the run does not skim.
    func frame(_ span: ServerFrameReader.FrameSpan) -> ServerFrame {
        ServerFrame(kind: span.kind, payload: withPayload(of: span) { Array($0) })
    }
}
