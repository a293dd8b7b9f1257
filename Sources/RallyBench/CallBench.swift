import ArgumentParser
import Foundation
import HummingbirdWSClient
import Logging
import RallyCore
import RallyCrypto
import RallyWire

/// `rally-bench call`: the call signaling's round trip through the relay
/// (a sealed offer from one participant, the other's sealed answer back),
/// the relay's memory for many idle rooms (created only, and with one
/// participant waiting in each), and, when headless Chromium is installed
/// (scripts/test.sh installs it), the time from two browser pages opening
/// a call to media flowing between them. Prints numbers; asserts nothing.
struct CallBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "call",
        abstract: "Measure call signaling round trips, idle rooms' memory and browser time to media.")

    @Option(help: "Offer → answer round trips to time.") var roundTrips = 2000
    @Option(help: "Idle rooms whose memory is measured.") var rooms = 1000
    @Option(help: "Browser calls to time (0 skips; needs chromium, chromium-driver and python3-selenium).")
    var browserRuns = 3

    func run() async throws {
        let relay = try ChildRelay.start()
        defer { relay.stop() }
        Output.write("relay: separate process pid \(relay.pid) on \(relay.url)")

        let before = ProcessMemory.residentKiB(pid: relay.pid) ?? 0
        var created: [String] = []
        for _ in 0..<rooms { created.append(try await Self.createRoom(relayURL: relay.url)) }
        let afterCreate = ProcessMemory.residentKiB(pid: relay.pid) ?? 0
        let waiting = WaitingParticipants()
        for room in created { try await waiting.join(relayURL: relay.url, room: room) }
        let afterJoin = ProcessMemory.residentKiB(pid: relay.pid) ?? 0
        Output.write("relay resident memory (VmRSS): idle relay \(before / 1024) MiB")
        Output.write(
            String(
                format: "  + %d rooms created, nobody in them: %d MiB (%.1f KiB per room)", rooms, afterCreate / 1024,
                Double(afterCreate - before) / Double(max(rooms, 1))))
        Output.write(
            String(
                format: "  + one participant waiting in each (%d WebSockets): %d MiB (%.1f KiB per waiting room)",
                rooms, afterJoin / 1024, Double(afterJoin - afterCreate) / Double(max(rooms, 1))))
        await waiting.close()

        let latencies = try await Self.roundTrips(relayURL: relay.url, count: roundTrips).sorted()
        Output.write(
            String(
                format:
                    "signaling offer → answer through the relay (sealed, WebSocket): %d round trips, p50 %.3f ms, p99 %.3f ms, max %.3f ms",
                latencies.count, ReconnectBench.percentile(latencies, 0.50), ReconnectBench.percentile(latencies, 0.99),
                latencies.last ?? 0))

        if browserRuns > 0 { try browser(runs: browserRuns) }
    }

    // MARK: Signaling

    /// Alice and Bob in one room on two WebSockets; Alice sends a sealed
    /// offer, Bob opens it and answers sealed; the clock runs from Alice's
    /// send to Alice opening the answer.
    static func roundTrips(relayURL: URL, count: Int) async throws -> [Double] {
        let room = try await createRoom(relayURL: relayURL)
        let link = CallLink.fresh(relayURL: relayURL, room: room)
        let seal = CallSignalSeal(secret: link.secret, room: room)
        let bob = try await BenchRoomSocket.join(relayURL: relayURL, room: room)
        let alice = try await BenchRoomSocket.join(relayURL: relayURL, room: room)
        let answering = Task {
            while let frame = await bob.next() {
                guard case .signal(let from, let data) = frame, let offer = seal.open(text: data) else { continue }
                bob.send(
                    .signal(to: from, data: seal.seal(text: offer.replacingOccurrences(of: "offer", with: "answer"))))
            }
        }
        defer { answering.cancel() }
        let offer =
            "v=0\r\no=bench 1 offer\r\n"
            + String(repeating: "a=candidate:1 1 udp 2122260223 192.0.2.1 50000 typ host\r\n", count: 20)
        let bobID = await bob.participant
        var latencies: [Double] = []
        latencies.reserveCapacity(count)
        for _ in 0..<count {
            let start = ContinuousClock.now
            alice.send(.signal(to: bobID, data: seal.seal(text: offer)))
            while let frame = await alice.next() {
                if case .signal(_, let data) = frame, seal.open(text: data) != nil { break }
            }
            latencies.append(GroupBench.milliseconds(ContinuousClock.now - start))
        }
        await alice.close()
        await bob.close()
        return latencies
    }

    static func createRoom(relayURL: URL) async throws -> String {
        try await CallRooms.create(relayURL: relayURL).link.room
    }

    // MARK: Browser

    /// Runs the browser test's connect case `runs` times and prints its
    /// time from opening both pages to bytes flowing.
    func browser(runs: Int) throws {
        let root = URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
        let script = root.appendingPathComponent("Tests/Browser/call_browser_test.py")
        let rally = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
            .appendingPathComponent("rally")
        guard FileManager.default.fileExists(atPath: script.path),
            FileManager.default.isExecutableFile(atPath: "/usr/bin/chromium"),
            FileManager.default.isExecutableFile(atPath: rally.path)
        else {
            Output.write(
                "browser time to media: skipped (run from the package root, with chromium installed and the rally CLI built for the same configuration)"
            )
            return
        }
        var times: [Double] = []
        for _ in 0..<runs {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            process.arguments = [script.path, "--rally", rally.path, "--only", "connect"]
            let pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = FileHandle.nullDevice
            try process.run()
            let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            guard let last = output.split(separator: "\n").last,
                let object = try? JSONSerialization.jsonObject(with: Data(last.utf8)) as? [String: Any],
                let milliseconds = (object["time_to_media_ms"] as? NSNumber)?.doubleValue
            else {
                Output.write("browser time to media: the browser run failed:\n\(output)")
                return
            }
            times.append(milliseconds)
        }
        Output.write(
            String(
                format:
                    "browser time to media (two headless Chromium pages open the call → bytes received rising): %d runs, median %.0f ms, min %.0f ms, max %.0f ms",
                times.count, ReconnectBench.percentile(times.sorted(), 0.5), times.min() ?? 0, times.max() ?? 0))
    }
}

/// One participant's WebSocket in a call room, speaking the JSON frames.
actor BenchRoomSocket {
    private(set) var participant = ""
    private var iterator: AsyncStream<RoomServerFrame>.AsyncIterator
    private let outbound: AsyncStream<RoomClientFrame>.Continuation
    private let task: Task<Void, Never>

    private init(url: String) {
        let (inbound, delivered) = AsyncStream.makeStream(of: RoomServerFrame.self, bufferingPolicy: .unbounded)
        let (toSend, sending) = AsyncStream.makeStream(of: RoomClientFrame.self, bufferingPolicy: .unbounded)
        sending.yield(.join(token: nil))
        var logger = Logger(label: "rally.bench.call")
        logger.logLevel = .error
        iterator = inbound.makeAsyncIterator()
        outbound = sending
        task = Task {
            _ = try? await WebSocketClient.connect(url: url, logger: logger) { messages, writer, _ in
                let writing = Task {
                    for await frame in toSend {
                        try await writer.write(.text(String(decoding: RoomFrameCodec.encode(frame), as: UTF8.self)))
                    }
                }
                defer { writing.cancel() }
                for try await message in messages.messages(maxSize: RoomWireLimits.maxFrameBytes) {
                    guard case .text(let text) = message,
                        let frame = try? RoomFrameCodec.decodeServer(Data(text.utf8))
                    else { continue }
                    delivered.yield(frame)
                }
            }
            delivered.finish()
        }
    }

    static func join(relayURL: URL, room: String) async throws -> BenchRoomSocket {
        var components = URLComponents(url: relayURL, resolvingAgainstBaseURL: false)!
        components.scheme = "ws"
        components.path = "/v1/rooms/\(room)/ws"
        let socket = BenchRoomSocket(url: components.string!)
        try await socket.awaitJoined(room)
        return socket
    }

    private func awaitJoined(_ room: String) async throws {
        guard case .joined(let participant, _, _)? = await next() else {
            close()
            throw ValidationError("the relay did not let a participant join room \(room)")
        }
        self.participant = participant
    }

    func next() async -> RoomServerFrame? {
        var iterator = self.iterator
        defer { self.iterator = iterator }
        return await iterator.next(isolation: self)
    }

    nonisolated func send(_ frame: RoomClientFrame) {
        outbound.yield(frame)
    }

    func close() {
        outbound.finish()
        task.cancel()
    }
}

/// Participants that joined and now wait, one per room.
actor WaitingParticipants {
    private var sockets: [BenchRoomSocket] = []

    func join(relayURL: URL, room: String) async throws {
        sockets.append(try await BenchRoomSocket.join(relayURL: relayURL, room: room))
    }

    func close() async {
        for socket in sockets { await socket.close() }
        sockets.removeAll()
    }
}
