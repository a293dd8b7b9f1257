import Foundation
import RallyRelay
import RallyTestSupport
import RallyWireLoad
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The bench's plain-socket load generator: its framing against hostile
/// server bytes, and whole runs against a real relay.
@Suite("Wire load generator")
struct WireLoadTests {
    /// An unmasked server frame, as a server writes it.
    static func serverFrame(_ payload: [UInt8], first: UInt8 = 0x82) -> [UInt8] {
        var bytes = [first]
        if payload.count < 126 {
            bytes.append(UInt8(payload.count))
        } else if payload.count <= 0xFFFF {
            bytes += [126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
        } else {
            bytes.append(127)
            for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8((payload.count >> shift) & 0xFF)) }
        }
        return bytes + payload
    }

    static func error(reading bytes: [UInt8]) -> ServerFrameError? {
        var reader = ServerFrameReader()
        reader.append(bytes)
        do {
            _ = try reader.next()
            return nil
        } catch {
            return error
        }
    }

    @Test("frames of each length encoding come out whole, however the bytes are split")
    func framesInPieces() throws {
        let payloads: [[UInt8]] = [[], [1, 2, 3], Array(repeating: 7, count: 126), Array(repeating: 9, count: 70_000)]
        let stream = payloads.flatMap { Self.serverFrame($0) }
        for chunk in [1, 5, 4096, stream.count] {
            var reader = ServerFrameReader()
            var frames: [ServerFrame] = []
            var offset = 0
            while offset < stream.count {
                reader.append(Array(stream[offset..<min(offset + chunk, stream.count)]))
                offset += chunk
                while let frame = try reader.next() { frames.append(frame) }
            }
            #expect(frames.map(\.payload) == payloads, "chunks of \(chunk)")
            #expect(frames.allSatisfy { $0.kind == .binary })
            #expect(reader.pendingBytes == 0)
        }
    }

    @Test("a truncated frame waits for the rest and keeps what came")
    func truncated() throws {
        let frame = Self.serverFrame(Array(repeating: 3, count: 300))
        var reader = ServerFrameReader()
        reader.append(Array(frame.prefix(3)))
        #expect(try reader.next() == nil)
        reader.append(Array(frame[3..<200]))
        #expect(try reader.next() == nil)
        #expect(reader.pendingBytes == 200)
        reader.append(Array(frame[200...]))
        #expect(try reader.next()?.payload == Array(repeating: 3, count: 300))
    }

    @Test("spans read frames in place, the same bytes next() copies, until the next append")
    func spansInPlace() throws {
        let payloads: [[UInt8]] = [[1, 2, 3], Array(repeating: 7, count: 300), []]
        var reader = ServerFrameReader()
        reader.append(payloads.flatMap { Self.serverFrame($0) } + Array(Self.serverFrame([9, 9]).prefix(3)))
        var spans: [ServerFrameReader.FrameSpan] = []
        while let span = try reader.nextSpan() { spans.append(span) }
        // Every span is still readable after the ones behind it were cut.
        #expect(spans.map { span in reader.withPayload(of: span) { Array($0) } } == payloads)
        #expect(spans.allSatisfy { $0.kind == .binary })
        #expect(reader.pendingBytes == 3)
        // The next append drops what was returned and keeps the partial frame.
        reader.append(Array(Self.serverFrame([9, 9]).dropFirst(3)))
        let last = try reader.next()
        #expect(last?.kind == .binary && last?.payload == [9, 9])
        #expect(reader.pendingBytes == 0)
        reader.append(Self.serverFrame([0x03, 0xE8], first: 0x88))
        #expect(try reader.nextSpan()?.kind == .close(code: 1000))
    }

    @Test("control frames: ping, pong and close with its code")
    func controlFrames() throws {
        var reader = ServerFrameReader()
        reader.append(Self.serverFrame([1, 2], first: 0x89) + Self.serverFrame([], first: 0x8A))
        reader.append(Self.serverFrame([0x03, 0xE9, 0x41], first: 0x88) + Self.serverFrame([], first: 0x88))
        #expect(try reader.next()?.kind == .ping)
        #expect(try reader.next()?.kind == .pong)
        #expect(try reader.next()?.kind == .close(code: 1001))
        #expect(try reader.next()?.kind == .close(code: 1005))
    }

    @Test("hostile server bytes get a typed error")
    func hostile() {
        #expect(Self.error(reading: [0x82, 0x81, 0, 0, 0, 0, 1]) == .masked)
        #expect(Self.error(reading: Self.serverFrame([1], first: 0xC2)) == .reservedBits)
        #expect(Self.error(reading: Self.serverFrame([1], first: 0x02)) == .fragmented)
        #expect(Self.error(reading: Self.serverFrame([1], first: 0x80)) == .fragmented)
        #expect(Self.error(reading: Self.serverFrame([], first: 0x09)) == .fragmented)
        #expect(Self.error(reading: Self.serverFrame([1], first: 0x83)) == .unknownOpcode(3))
        #expect(
            Self.error(reading: Self.serverFrame(Array(repeating: 0, count: 126), first: 0x89))
                == .oversizedControlFrame(126))
        // Refused from the header alone, before any of the payload came.
        let huge: [UInt8] = [0x82, 127, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]
        #expect(Self.error(reading: huge) == .tooLarge(UInt64(Int64.max)))
        let overLimit = UInt64(ServerFrameReader.maxPayloadBytes + 1)
        var header: [UInt8] = [0x82, 127]
        for shift in stride(from: 56, through: 0, by: -8) { header.append(UInt8((overLimit >> UInt64(shift)) & 0xFF)) }
        #expect(Self.error(reading: header) == .tooLarge(overLimit))
    }

    @Test("a client frame is masked and carries its payload", arguments: [0, 125, 126, 65_535, 65_536])
    func clientFrame(length: Int) {
        let payload = (0..<length).map { UInt8(truncatingIfNeeded: $0 * 31) }
        var bytes: [UInt8] = []
        ClientFrameEncoder.appendFrame(payload, mask: 0x0102_0304, to: &bytes)
        #expect(bytes[0] == 0x82)
        #expect(bytes[1] & 0x80 != 0)
        let headerLength = length < 126 ? 2 : length <= 0xFFFF ? 4 : 10
        var declared = Int(bytes[1] & 0x7F)
        if headerLength > 2 { declared = bytes[2..<headerLength].reduce(0) { $0 << 8 | Int($1) } }
        #expect(declared == length)
        #expect(Array(bytes[headerLength..<headerLength + 4]) == [1, 2, 3, 4])
        let unmasked = bytes[(headerLength + 4)...].enumerated().map { $0.element ^ UInt8($0.offset % 4 + 1) }
        #expect(unmasked == payload)
    }

    @Test("a run publishes every message once and each subscriber gets every one")
    func runAgainstARelay() async throws {
        let relay = try await TestRelay.start()
        let port = try #require(relay.url.port)
        let result = try await offThePool {
            let load = try WireLoad(
                WireLoadPlan(
                    relayPorts: [port], clients: 3, messagesPerClient: 20, payloadBytes: 64, subscribersPerTopic: 2))
            return try load.run()
        }
        #expect(result.acknowledged == 60)
        #expect(result.delivered == 120)
        #expect(result.latenciesMs.count == 120)
        #expect(result.latenciesMs.allSatisfy { $0 >= 0 })
        #expect(result.latenciesMs == result.latenciesMs.sorted())
        #expect(result.ackLatenciesMs.count == 60)
        #expect(result.ackLatenciesMs.allSatisfy { $0 >= 0 })
        #expect(result.ackLatenciesMs == result.ackLatenciesMs.sorted())
        await relay.stop()
    }

    @Test("a refusal from the relay ends the run with its code")
    func refusal() async throws {
        var limits = RelayLimits.default
        limits.publishBurst = 3
        limits.publishRatePerSecond = 1
        let relay = try await TestRelay.start(limits: limits, clock: ManualRelayClock())
        let port = try #require(relay.url.port)
        let outcome: Result<WireLoadResult, WireLoadError> = await offThePool {
            do throws(WireLoadError) {
                let load = try WireLoad(
                    WireLoadPlan(relayPorts: [port], clients: 1, messagesPerClient: 10, payloadBytes: 16))
                return .success(try load.run())
            } catch {
                return .failure(error)
            }
        }
        guard case .failure(.refused(let code, let message)) = outcome else {
            Issue.record("expected a refusal, got \(outcome)")
            await relay.stop()
            return
        }
        #expect(code == "rate_limited")
        #expect(message.contains("too many publishes"))
        await relay.stop()
    }

    @Test("nothing listening is a connect error naming the port")
    func nothingListening() async throws {
        // A port bound but not listening: refused, and no other test's
        // relay can take it meanwhile.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        try #require(bound)
        let port = Int(UInt16(bigEndian: address.sin_port))
        let outcome: WireLoadError? = await offThePool {
            do throws(WireLoadError) {
                _ = try WireLoad(WireLoadPlan(relayPorts: [port], clients: 1, messagesPerClient: 1, payloadBytes: 16))
                return nil
            } catch {
                return error
            }
        }
        #expect(outcome == .connectFailed(port: port, errno: ECONNREFUSED))
    }
}
