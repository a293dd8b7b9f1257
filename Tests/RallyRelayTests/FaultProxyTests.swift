import Dispatch
import Foundation
import RallyCrypto
import RallyTestSupport
import RallyWire
import RallyWireLoad
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The fault proxy in front of a real relay: what each mode does to HTTP
/// requests and WebSocket sessions that go through it.
@Suite("FaultProxy", .timeLimit(.minutes(10)))
struct FaultProxyTests {
    @Test("pass forwards HTTP, and a WebSocket session signed with the proxy's origin")
    func passesTraffic() async throws {
        try await withProxiedRelay { setup in
            let health = try await get(setup.proxy.url, "/healthz")
            #expect(health.status == 200)
            #expect(health.body == "ok")

            let client = try await connectWire(through: setup.proxy)
            try await client.authenticate(Identity(displayName: "Ada"))
            try await client.expectStillServing()
            #expect(setup.proxy.connectionCount >= 1)
            #expect(setup.proxy.acceptedCount >= 2)
            await client.close()
        }
    }

    @Test("blackhole makes a new request time out; back to pass, a fresh request goes through")
    func blackholeTimesOutRequests() async throws {
        try await withProxiedRelay { setup in
            setup.proxy.setMode(.blackhole)
            // An intended timeout: the request is never answered.
            await #expect {
                try await get(setup.proxy.url, "/healthz", timeout: 1)
            } throws: { error in
                (error as? URLError)?.code == .timedOut
            }
            try await setup.proxy.waitUntil { $0.droppedBytesToUpstream > 0 }

            setup.proxy.setMode(.pass)
            #expect(try await get(setup.proxy.url, "/healthz").status == 200)
        }
    }

    @Test("blackhole silences an open WebSocket; back to pass, it carries on without the lost bytes")
    func blackholeSilencesOpenConnections() async throws {
        try await withProxiedRelay { setup in
            let client = try await connectWire(through: setup.proxy)
            try await client.authenticate(Identity(displayName: "Ada"))

            setup.proxy.setMode(.blackhole)
            var ping = WirePing()
            ping.nonce = 1
            try await client.send(1, .ping(ping))
            // A masked client frame this short has a 6-byte header.
            let lostBytes = WireClientFrame.make(1, .ping(ping)).bytes.count + 6
            try await setup.proxy.waitUntil { $0.droppedBytesToUpstream >= lostBytes }

            setup.proxy.setMode(.pass)
            ping.nonce = 2
            try await client.send(2, .ping(ping))
            let reply = try #require(try await client.next())
            #expect(reply.requestID == 2)
            #expect(reply.pong.nonce == 2)
            await client.close()
        }
    }

    @Test("refuse resets open connections and new ones; back to pass, connections are accepted")
    func refuseResetsConnections() async throws {
        try await withProxiedRelay { setup in
            let client = try await connectWire(through: setup.proxy)
            setup.proxy.setMode(.refuse)
            // Nil: the connection ended (reset) rather than timing out.
            #expect(try await client.socket.receive() == nil)
            try await setup.proxy.waitUntil { $0.connections == 0 }

            let accepted = setup.proxy.acceptedCount
            await #expect(throws: URLError.self) { try await get(setup.proxy.url, "/healthz") }
            #expect(setup.proxy.acceptedCount > accepted)
            #expect(setup.proxy.connectionCount == 0)

            setup.proxy.setMode(.pass)
            #expect(try await get(setup.proxy.url, "/healthz").status == 200)
        }
    }

    @Test("refuseWebSocketUpgrades answers an upgrade 403 and passes plain HTTP")
    func refuseWebSocketUpgrades() async throws {
        try await withProxiedRelay { setup in
            setup.proxy.setMode(.refuseWebSocketUpgrades)
            let health = try await get(setup.proxy.url, "/healthz")
            #expect(health.status == 200)
            #expect(health.body == "ok")

            // Header names and values in any case.
            let response = try await RawHTTP.exchange(
                port: setup.proxy.port,
                "GET /v1/ws HTTP/1.1\r\nhost: 127.0.0.1:\(setup.proxy.port)\r\nupgrade: WebSocket\r\n"
                    + "connection: upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                    + "sec-websocket-version: 13\r\n\r\n")
            #expect(response.hasPrefix("HTTP/1.1 403 Forbidden\r\n"))
            #expect(response.contains("\r\nConnection: close\r\n"))
            #expect(response.contains("\r\nContent-Length: 0\r\n"))
            await #expect(throws: POSIXError(.EPROTO)) { try await RawWebSocket.connect(port: setup.proxy.port) }

            // Plain requests over a raw socket pass too, body and all.
            let plain = try await RawHTTP.exchange(
                port: setup.proxy.port,
                "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:\(setup.proxy.port)\r\nConnection: close\r\n\r\n")
            #expect(plain.hasPrefix("HTTP/1.1 200"))
            #expect(plain.hasSuffix("\r\n\r\nok"))

            setup.proxy.setMode(.pass)
            let client = try await connectWire(through: setup.proxy)
            try await client.authenticate(Identity(displayName: "Ada"))
            await client.close()
        }
    }

    @Test("resetAll drops an open WebSocket; new connections still work")
    func resetAllDropsConnections() async throws {
        try await withProxiedRelay { setup in
            let client = try await connectWire(through: setup.proxy)
            try await client.authenticate(Identity(displayName: "Ada"))
            #expect(setup.proxy.connectionCount == 1)

            setup.proxy.resetAll()
            #expect(try await client.socket.receive() == nil)
            try await setup.proxy.waitUntil { $0.connections == 0 }

            let again = try await connectWire(through: setup.proxy)
            try await again.authenticate(Identity(displayName: "Ada"))
            try await again.expectStillServing()
            await again.close()
        }
    }

    @Test("stall holds a request's bytes; back to pass, they are delivered intact and answered")
    func stallHoldsRequests() async throws {
        try await withProxiedRelay { setup in
            setup.proxy.setMode(.stall)
            let request =
                "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:\(setup.proxy.port)\r\nConnection: close\r\n\r\n"
            let length = request.utf8.count
            let exchange = Task { try await RawHTTP.exchange(port: setup.proxy.port, request) }
            try await setup.proxy.waitUntil { $0.heldBytesToUpstream >= length }
            let stalled = setup.proxy.statistics
            #expect(stalled.heldBytesToUpstream == length)
            #expect(stalled.forwardedBytesToUpstream == 0)

            setup.proxy.setMode(.pass)
            let response = try await exchange.value
            #expect(response.hasPrefix("HTTP/1.1 200"))
            #expect(response.hasSuffix("\r\n\r\nok"))
            let statistics = setup.proxy.statistics
            #expect(statistics.forwardedBytesToUpstream == length)
            #expect(statistics.delayedBytesToUpstream == length)
            #expect(statistics.heldBytesToUpstream == 0)
            #expect(statistics.heldBytesToClients == 0)
            #expect(statistics.droppedBytesToUpstream == 0)
            #expect(statistics.droppedBytesToClients == 0)
        }
    }

    @Test("throttle: a 64 KiB download at 32 KiB/s arrives complete and identical")
    func throttleDownload() async throws {
        let payload = RawTCP.pattern(64 * 1024, seed: 7)
        try await withProxiedPeer { proxy, peer in
            proxy.setMode(.throttle(bytesPerSecond: 32 * 1024))
            let served = Task {
                try await RawTCP.run {
                    let fd = try peer.accept()
                    defer { close(fd) }
                    try RawTCP.sendAll(fd, payload)
                    shutdown(fd, Int32(SHUT_WR))
                    return try RawTCP.receiveAll(fd).count
                }
            }
            let received = try await RawTCP.run {
                let fd = try RawTCP.connect(port: proxy.port)
                defer { close(fd) }
                shutdown(fd, Int32(SHUT_WR))
                return try RawTCP.receiveAll(fd)
            }
            #expect(try await served.value == 0)
            #expect(received.count == payload.count)
            #expect(received == payload)

            let statistics = proxy.statistics
            #expect(statistics.forwardedBytesToClients == payload.count)
            #expect(statistics.forwardedBytesToUpstream == 0)
            // The bucket holds a tenth of a second's worth: most bytes waited.
            #expect(statistics.delayedBytesToClients > 0)
            #expect(statistics.heldBytesToClients == 0)
            #expect(statistics.droppedBytesToClients == 0)
        }
    }

    @Test("stall past its capacity stops reading (backpressure); back to pass, every byte arrives in order")
    func stallBackpressure() async throws {
        // More than the cap plus what the kernel buffers on loopback (a few
        // MiB each way): the sender cannot finish while the proxy holds.
        let payload = RawTCP.pattern(32 * 1024 * 1024, seed: 11)
        try await withProxiedPeer { proxy, peer in
            proxy.setMode(.stall)
            let sink = Task {
                try await RawTCP.run {
                    let fd = try peer.accept()
                    defer { close(fd) }
                    return try RawTCP.receiveAll(fd)
                }
            }
            let progress = SendProgress()
            let sender = Task {
                try await RawTCP.run {
                    let fd = try RawTCP.connect(port: proxy.port)
                    defer { close(fd) }
                    try RawTCP.sendAll(fd, payload, progress: progress)
                    shutdown(fd, Int32(SHUT_WR))
                    return try RawTCP.receiveAll(fd).count
                }
            }

            try await proxy.waitUntil { $0.heldBytesToUpstream >= FaultProxy.stallCapacity }
            let stalled = proxy.statistics
            // The cap, plus at most the one read that crossed it.
            #expect(stalled.heldBytesToUpstream <= FaultProxy.stallCapacity + 64 * 1024)
            #expect(stalled.forwardedBytesToUpstream == 0)
            #expect(progress.sent < payload.count)

            proxy.setMode(.pass)
            let received = try await sink.value
            #expect(try await sender.value == 0)
            #expect(progress.sent == payload.count)
            if received != payload {
                let first = zip(received, payload).enumerated().first { $0.element.0 != $0.element.1 }?.offset
                Issue.record("\(received.count) bytes received, differing from byte \(first ?? received.count)")
            }

            let statistics = proxy.statistics
            #expect(statistics.forwardedBytesToUpstream == payload.count)
            #expect(statistics.delayedBytesToUpstream >= FaultProxy.stallCapacity)
            #expect(statistics.heldBytesToUpstream == 0)
            #expect(statistics.droppedBytesToUpstream == 0)
            #expect(statistics.droppedBytesToClients == 0)
        }
    }

    @Test("upstreamPort is asked per connection: a dead upstream closes the client, a new relay is found")
    func upstreamPortIsReadPerConnection() async throws {
        let upstream = UpstreamPort()
        let proxy = try await FaultProxy.start { await upstream.get() }
        let first = try await TestRelay.start(publicURL: proxy.url)
        var second: TestRelay?
        do {
            await upstream.set(first.relay.port)
            #expect(try await get(proxy.url, "/healthz").status == 200)

            await first.stop()
            await #expect(throws: URLError.self) { try await get(proxy.url, "/healthz") }
            try await proxy.waitUntil { $0.connections == 0 }

            let relay = try await TestRelay.start(publicURL: proxy.url)
            second = relay
            await upstream.set(relay.relay.port)
            #expect(try await get(proxy.url, "/healthz").status == 200)
            let client = try await connectWire(through: proxy)
            try await client.authenticate(Identity(displayName: "Ada"))
            await client.close()
        } catch {
            await proxy.stop()
            await second?.stop()
            throw error
        }
        await proxy.stop()
        await second?.stop()
    }
}

// MARK: - Helpers

/// A relay behind a fault proxy. The proxy starts first, so its URL can be
/// the relay's public URL (clients sign with the origin they connect to);
/// it learns the relay's port when connections arrive.
private struct ProxiedRelay {
    let proxy: FaultProxy
    let relay: TestRelay
}

private func withProxiedRelay(_ body: (ProxiedRelay) async throws -> Void) async throws {
    let upstream = UpstreamPort()
    let proxy = try await FaultProxy.start { await upstream.get() }
    let relay: TestRelay
    do {
        relay = try await TestRelay.start(publicURL: proxy.url)
    } catch {
        await proxy.stop()
        throw error
    }
    await upstream.set(relay.relay.port)
    let setup = ProxiedRelay(proxy: proxy, relay: relay)
    do {
        try await body(setup)
    } catch {
        await proxy.stop()
        await relay.stop()
        throw error
    }
    await proxy.stop()
    await relay.stop()
}

/// A fault proxy in front of a plain loopback peer instead of a relay, for
/// byte-exact transfers.
private func withProxiedPeer(_ body: (FaultProxy, LoopbackListener) async throws -> Void) async throws {
    let peer = try LoopbackListener()
    defer { peer.close() }
    let port = peer.port
    let proxy = try await FaultProxy.start { port }
    do {
        try await body(proxy, peer)
    } catch {
        await proxy.stop()
        throw error
    }
    await proxy.stop()
}

/// The relay port the proxy forwards to; asking waits until there is one.
private actor UpstreamPort {
    private var port: Int?
    private var waiters: [CheckedContinuation<Int, Never>] = []

    func set(_ port: Int) {
        self.port = port
        for waiter in waiters { waiter.resume(returning: port) }
        waiters = []
    }

    func get() async -> Int {
        if let port { return port }
        return await withCheckedContinuation { waiters.append($0) }
    }
}

/// A GET on a session of its own, so every request opens a fresh
/// connection through the proxy.
private func get(_ base: URL, _ path: String, timeout: TimeInterval = 30) async throws -> (status: Int, body: String) {
    let session = URLSession(configuration: .ephemeral)
    defer { session.invalidateAndCancel() }
    var request = URLRequest(url: URL(string: base.absoluteString + path)!)
    request.timeoutInterval = timeout
    let (data, response) = try await session.data(for: request)
    let status = (response as? HTTPURLResponse)?.statusCode ?? 0
    return (status, String(decoding: data, as: UTF8.self))
}

/// A protobuf WebSocket client connected through the proxy, signing with
/// the proxy's origin.
private func connectWire(through proxy: FaultProxy) async throws -> WireClient {
    let socket = try await RawWebSocket.connect(port: proxy.port)
    let first = try #require(try await socket.receive())
    let challenge = try FrameCodec.decodeServerFrame(first.payload).challenge
    return WireClient(socket: socket, challenge: challenge, origin: proxy.url.absoluteString)
}

/// Sends raw request bytes over a fresh loopback socket and reads the
/// answer until the server closes. Blocking calls run on a private queue.
private enum RawHTTP {
    static func exchange(port: Int, _ request: String) async throws -> String {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue(label: "raw-http").async {
                continuation.resume(with: Result { try exchangeBlocking(port: port, request) })
            }
        }
    }

    private static func exchangeBlocking(port: Int, _ request: String) throws -> String {
        let fd: Int32
        switch LoopbackTCP.connect(port: port, receiveTimeoutSeconds: 20) {
        case .success(let connected): fd = connected
        case .failure(let failure): throw POSIXError(POSIXErrorCode(rawValue: failure.errno) ?? .EIO)
        }
        defer { close(fd) }
        let bytes = Array(request.utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes {
                send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            guard written > 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            offset += written
        }
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let read = recv(fd, &buffer, buffer.count, 0)
            if read == 0 { break }
            guard read > 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            response += buffer[0..<read]
        }
        return String(decoding: response, as: UTF8.self)
    }
}

/// How far a blocking send got, read from another task.
///
/// `@unchecked Sendable`: `count` is only touched under `lock`.
private final class SendProgress: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0

    var sent: Int { lock.withLock { count } }

    func add(_ bytes: Int) { lock.withLock { count += bytes } }
}

/// A listening socket on a free loopback port; each `accept()` blocks its
/// caller (run it through ``RawTCP/run(_:)``).
private final class LoopbackListener: Sendable {
    let port: Int
    private let fd: Int32

    init() throws {
        let fd = try RawTCP.makeSocket()
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = RawTCP.loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard bound == 0, named == 0, listen(fd, 8) == 0 else {
            closeSocket(fd)
            throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
        }
        self.fd = fd
        self.port = Int(UInt16(bigEndian: address.sin_port))
    }

    /// Accepts one connection, with a 120 s receive timeout (a safety net: a busy machine can starve a throttled transfer for tens of seconds) on it.
    func accept() throws -> Int32 {
        #if canImport(Glibc)
            let connection = Glibc.accept(fd, nil, nil)
        #else
            let connection = Darwin.accept(fd, nil, nil)
        #endif
        guard connection >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        RawTCP.setReceiveTimeout(connection)
        return connection
    }

    func close() { closeSocket(fd) }
}

/// Blocking loopback TCP for byte-exact transfers through the proxy.
private enum RawTCP {
    /// Runs blocking socket work on a thread of its own.
    static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue(label: "raw-tcp").async { continuation.resume(with: Result { try body() }) }
        }
    }

    /// `count` deterministic pseudo-random bytes.
    static func pattern(_ count: Int, seed: UInt64) -> [UInt8] {
        var generator = SeededGenerator(seed: seed)
        return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            var index = 0
            while index < count {
                var word = generator.next()
                for _ in 0..<min(8, count - index) {
                    buffer[index] = UInt8(truncatingIfNeeded: word)
                    word >>= 8
                    index += 1
                }
            }
            initialized = count
        }
    }

    static func makeSocket() throws -> Int32 {
        #if canImport(Glibc)
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
            let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw POSIXError(.EIO) }
        return fd
    }

    static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }

    static func setReceiveTimeout(_ fd: Int32) {
        var timeout = timeval(tv_sec: 120, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Connects to `port` on 127.0.0.1, with a 120 s receive timeout.
    static func connect(port: Int) throws -> Int32 {
        switch LoopbackTCP.connect(port: port, receiveTimeoutSeconds: 120) {
        case .success(let fd): return fd
        case .failure(let failure): throw POSIXError(POSIXErrorCode(rawValue: failure.errno) ?? .EIO)
        }
    }

    static func sendAll(_ fd: Int32, _ bytes: [UInt8], progress: SendProgress? = nil) throws {
        var offset = 0
        while offset < bytes.count {
            let end = min(bytes.count, offset + 64 * 1024)
            let written = bytes[offset..<end].withUnsafeBytes {
                send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            guard written > 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            offset += written
            progress?.add(written)
        }
    }

    /// Reads until the peer closes.
    static func receiveAll(_ fd: Int32) throws -> [UInt8] {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let read = recv(fd, &buffer, buffer.count, 0)
            if read == 0 { return received }
            guard read > 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            received += buffer[0..<read]
        }
    }
}

/// `close(2)`, for scopes where a member named `close` hides it.
private func closeSocket(_ fd: Int32) {
    #if canImport(Glibc)
        _ = Glibc.close(fd)
    #else
        _ = Darwin.close(fd)
    #endif
}
