import Foundation
import RallyCrypto
import RallyWire

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What a load run does: `clients` publishers, each publishing
/// `messagesPerClient` messages of `payloadBytes` to a capability topic of
/// its own, one at a time (the next when the last is acknowledged), and
/// `subscribersPerTopic` connections per topic receiving them. With several
/// relays (nodes sharing a store), client `i` subscribes on node `i` and
/// publishes on node `i + 1`, so every message crosses nodes.
public struct WireLoadPlan: Sendable {
    public var relayPorts: [Int]
    public var clients: Int
    public var messagesPerClient: Int
    public var payloadBytes: Int
    public var subscribersPerTopic: Int

    public init(
        relayPorts: [Int], clients: Int, messagesPerClient: Int, payloadBytes: Int, subscribersPerTopic: Int = 1
    ) {
        self.relayPorts = relayPorts
        self.clients = clients
        self.messagesPerClient = messagesPerClient
        self.payloadBytes = payloadBytes
        self.subscribersPerTopic = subscribersPerTopic
    }

    /// The first 8 payload bytes carry the send time.
    public static let minimumPayloadBytes = 8
}

public struct WireLoadResult: Sendable {
    public var acknowledged = 0
    public var delivered = 0
    public var seconds = 0.0
    /// Publish → delivery, one per delivery, sorted.
    public var latenciesMs: [Double] = []
    /// Publish → acknowledgement, one per publish, sorted: what
    /// `redis-benchmark` reports for a command (request → reply).
    public var ackLatenciesMs: [Double] = []
}

/// A load generator that speaks the relay's protocol on plain sockets from
/// one thread, the way `redis-benchmark` loads Redis: every connection is
/// opened and authenticated and every publish frame encoded before the
/// timed part, which then only stamps, masks, writes and reads. What the
/// relay does is the same as for any client (its proofs, its commits, its
/// deliveries); what it costs the machine to generate the load is
/// several times less than a client SDK's, so on a small machine more of
/// it is left to the relay.
///
/// Blocking: run it on a thread of its own, not on a Swift concurrency
/// executor.
public final class WireLoad {
    /// A class, not a struct in the run's array: as a struct, every change
    /// of its counters went through a uniqueness check of the array.
    private final class Publisher {
        let socket: LoadSocket
        /// Each message's whole WebSocket frame, masked, waiting only for
        /// its send time.
        var frames: [[UInt8]]
        /// Where the send time's 8 bytes go in each frame, and the mask
        /// over those bytes.
        let stamps: [(offset: Int, mask: UInt64)]
        let firstRequestID: UInt64
        var sent = 0
        var acknowledged = 0
        /// When the publish waiting for its ack went out.
        var sentAt: UInt64 = 0

        init(socket: LoadSocket, frames: [[UInt8]], stamps: [(offset: Int, mask: UInt64)], firstRequestID: UInt64) {
            self.socket = socket
            self.frames = frames
            self.stamps = stamps
            self.firstRequestID = firstRequestID
        }
    }

    private let plan: WireLoadPlan
    private var publishers: [Publisher] = []
    /// The subscriber connections; what they receive is counted in the
    /// run's result.
    private var subscribers: [LoadSocket] = []
    private var maskState: UInt64 = UInt64.random(in: 1 ... .max)

    /// How long the run waits for any frame before it gives up.
    public static let stallSeconds = 30

    /// Opens, authenticates and subscribes every connection and encodes
    /// every publish.
    public init(_ plan: WireLoadPlan) throws(WireLoadError) {
        precondition(!plan.relayPorts.isEmpty && plan.payloadBytes >= WireLoadPlan.minimumPayloadBytes)
        self.plan = plan
        // Every subscriber connects before any publisher. A relay hands
        // accepted sockets to its event loops in turn, so a subscriber and
        // a publisher opened one after the other would put every publisher
        // on the same loop on a two-loop machine; connecting by role spreads
        // each role over all loops, as independent devices would.
        var topics: [(identity: Identity, access: TopicAccess, topic: String)] = []
        for index in 0..<plan.clients {
            let identity = Identity(displayName: "load-\(index)")
            let access: TopicAccess
            do { access = try TopicAccess(secret: TopicAccess.newSecret()) } catch {
                throw .unexpected("topic access: \(error)")
            }
            let topic = "bench/\(access.foundedTopicID)"
            topics.append((identity, access, topic))
            for _ in 0..<plan.subscribersPerTopic {
                let port = plan.relayPorts[index % plan.relayPorts.count]
                let (socket, nonce) = try connect(port: port, identity: identity)
                var frame = WireClientFrame()
                frame.requestID = 2
                frame.subscribe.topic = topic
                frame.subscribe.afterSeq = 0
                frame.subscribe.proof = access.connectionProof(
                    origin: Self.origin(port: port), challengeNonce: nonce, topic: topic)
                try send(frame, on: socket)
                let reply = try Self.reply(on: socket, what: "subscribed")
                guard case .subscribed? = reply.body else {
                    throw .unexpected("\(reply.body.map { "\($0)" } ?? "none") instead of subscribed")
                }
                subscribers.append(socket)
            }
        }
        for (index, client) in topics.enumerated() {
            let port = plan.relayPorts[(index + 1) % plan.relayPorts.count]
            let (socket, nonce) = try connect(port: port, identity: client.identity)
            let proof = client.access.connectionProof(
                origin: Self.origin(port: port), challengeNonce: nonce, topic: client.topic)
            publishers.append(try encodedPublishes(socket: socket, topic: client.topic, proof: proof))
        }
    }

    private static func origin(port: Int) -> String {
        RelayOrigin.of(URL(string: "http://127.0.0.1:\(port)")!) ?? ""
    }

    private func connect(port: Int, identity: Identity) throws(WireLoadError) -> (LoadSocket, Data) {
        let socket = try LoadSocket.open(port: port, path: "/v1/ws")
        let challenge = try Self.reply(on: socket, what: "the challenge")
        guard case .challenge(let body)? = challenge.body else { throw .unexpected("no challenge first") }
        var frame = WireClientFrame()
        frame.requestID = 1
        frame.authenticate = identity.authenticate(challengeNonce: body.nonce, origin: Self.origin(port: port))
        try send(frame, on: socket)
        let reply = try Self.reply(on: socket, what: "authenticated")
        guard case .authenticated? = reply.body else { throw .unexpected("no authenticated reply") }
        return (socket, body.nonce)
    }

    private static func reply(on socket: LoadSocket, what: String) throws(WireLoadError) -> WireServerFrame {
        while true {
            let frame = try socket.nextFrame(what: what)
            guard let decoded = try decode(frame) else { continue }
            return decoded
        }
    }

    /// A binary frame decoded; nil for a ping or pong. An error frame or a
    /// close ends the run.
    private static func decode(_ frame: ServerFrame) throws(WireLoadError) -> WireServerFrame? {
        switch frame.kind {
        case .binary:
            let decoded: WireServerFrame
            do { decoded = try FrameCodec.decodeServerFrame(Data(frame.payload)) } catch {
                throw .unexpected("an undecodable server frame: \(error)")
            }
            if case .error(let error)? = decoded.body {
                throw .refused(code: error.code.name, message: error.message)
            }
            return decoded
        case .close(let code): throw .closedByRelay(code: code)
        case .text: throw .unexpected("a text message")
        case .ping, .pong: return nil
        }
    }

    private func send(_ frame: WireClientFrame, on socket: LoadSocket) throws(WireLoadError) {
        var encoded: [UInt8] = []
        ClientFrameEncoder.appendFrame(Array(FrameCodec.encode(frame)), mask: nextMask(), to: &encoded)
        try socket.send(encoded)
    }

    /// Every publish of one publisher as the bytes the timed part sends:
    /// framed and masked (each with a mask of its own), so that sending
    /// one only writes its send time over the marker, masked.
    private func encodedPublishes(
        socket: LoadSocket, topic: String, proof: WireTopicProof
    ) throws(WireLoadError) -> Publisher {
        // A marker no random key or proof is likely to contain finds where
        // the payload landed in the encoded frame.
        let marker = (0..<WireLoadPlan.minimumPayloadBytes).map { _ in UInt8.random(in: .min ... .max) }
        var payload = Data(count: plan.payloadBytes)
        payload.replaceSubrange(0..<marker.count, with: marker)
        var frames: [[UInt8]] = []
        var stamps: [(offset: Int, mask: UInt64)] = []
        frames.reserveCapacity(plan.messagesPerClient)
        stamps.reserveCapacity(plan.messagesPerClient)
        let firstRequestID: UInt64 = 2
        for index in 0..<plan.messagesPerClient {
            var frame = WireClientFrame()
            frame.requestID = firstRequestID + UInt64(index)
            frame.publish.topic = topic
            frame.publish.payload = payload
            frame.publish.idempotencyKey = MessageSealing.newMessageID()
            frame.publish.proof = proof
            let message = Array(FrameCodec.encode(frame))
            guard let range = message.firstRange(of: marker) else {
                throw .unexpected("payload not found in its frame")
            }
            let mask = nextMask()
            var bytes: [UInt8] = []
            ClientFrameEncoder.appendFrame(message, mask: mask, to: &bytes)
            let payloadStart = bytes.count - message.count
            var stampMask: UInt64 = 0
            withUnsafeMutableBytes(of: &stampMask) { maskBytes in
                for index in 0..<maskBytes.count {
                    maskBytes[index] = ClientFrameEncoder.maskByte(mask, range.lowerBound + index)
                }
            }
            frames.append(bytes)
            stamps.append((payloadStart + range.lowerBound, stampMask))
        }
        return Publisher(socket: socket, frames: frames, stamps: stamps, firstRequestID: firstRequestID)
    }

    /// xorshift64: a fresh mask per frame, as RFC 6455 asks, without a
    /// system call.
    private func nextMask() -> UInt32 {
        maskState ^= maskState << 13
        maskState ^= maskState >> 7
        maskState ^= maskState << 17
        return UInt32(truncatingIfNeeded: maskState)
    }

    /// Sends `publisher`'s next message, stamped now.
    private func sendNext(_ publisher: Publisher) throws(WireLoadError) {
        let sequence = publisher.sent
        let (offset, mask) = publisher.stamps[sequence]
        let stamp = DispatchTime.now().uptimeNanoseconds
        publisher.frames[sequence].withUnsafeMutableBytes { frame in
            frame.storeBytes(of: stamp ^ mask, toByteOffset: offset, as: UInt64.self)
        }
        try publisher.socket.send(publisher.frames[sequence])
        publisher.sent += 1
        publisher.sentAt = stamp
    }

    /// The timed part: every publisher publishes its messages, one at a
    /// time, until every message is acknowledged and delivered.
    public func run() throws(WireLoadError) -> WireLoadResult {
        var descriptors = try ReadyDescriptors(publishers.map(\.socket.fd) + subscribers.map(\.fd))
        let perClient = plan.messagesPerClient
        let expectedDeliveries = perClient * subscribers.count
        var result = WireLoadResult()
        result.latenciesMs.reserveCapacity(expectedDeliveries)
        result.ackLatenciesMs.reserveCapacity(perClient * publishers.count)
        let start = DispatchTime.now().uptimeNanoseconds
        for publisher in publishers where perClient > 0 { try sendNext(publisher) }
        while result.acknowledged < perClient * publishers.count || result.delivered < expectedDeliveries {
            guard try descriptors.wait(timeoutMilliseconds: Int32(Self.stallSeconds * 1000)) else {
                throw .stalled(
                    seconds: Self.stallSeconds,
                    detail:
                        "\(result.acknowledged) of \(perClient * publishers.count) acknowledged, \(result.delivered) of \(expectedDeliveries) delivered"
                )
            }
            // Acknowledgements first: each sends its publisher's next
            // message, and its latency is the reply's, as redis-benchmark
            // times it, not the reply's plus the decoding of deliveries that
            // arrived with it. Publishers' slots come before subscribers'.
            for slot in descriptors.ready.sorted() {
                if slot < publishers.count {
                    try receiveAcks(slot, into: &result)
                } else {
                    try receiveDeliveries(slot - publishers.count, into: &result)
                }
            }
        }
        result.seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1_000_000_000
        result.latenciesMs.sort()
        result.ackLatenciesMs.sort()
        return result
    }

    private func receiveAcks(_ index: Int, into result: inout WireLoadResult) throws(WireLoadError) {
        let publisher = publishers[index]
        let socket = publisher.socket
        guard try socket.readAvailable() else { throw .closedByRelay(code: nil) }
        while let span = try socket.frameSpanOrNil() {
            try answerPing(span, on: socket)
            let expected = publisher.firstRequestID + UInt64(publisher.acknowledged)
            let skimmed = Self.skim(span, on: socket)
            if skimmed?.body != .publishAck || skimmed?.requestID != expected {
                // Anything but the expected ack is decoded in full, which
                // says what it is.
                guard let reply = try Self.decode(socket.frame(span)) else { continue }
                guard case .publishAck? = reply.body, reply.requestID == expected else {
                    throw .unexpected(
                        "request \(reply.requestID) answered with \(reply.body.map { "\($0)" } ?? "nothing"), expected the ack of \(expected)"
                    )
                }
            }
            let now = DispatchTime.now().uptimeNanoseconds
            result.ackLatenciesMs.append(Double(now &- publisher.sentAt) / 1_000_000)
            publisher.acknowledged += 1
            result.acknowledged += 1
            if publisher.sent < plan.messagesPerClient { try sendNext(publisher) }
        }
    }

    private func receiveDeliveries(_ index: Int, into result: inout WireLoadResult) throws(WireLoadError) {
        let socket = subscribers[index]
        guard try socket.readAvailable() else { throw .closedByRelay(code: nil) }
        while let span = try socket.frameSpanOrNil() {
            try answerPing(span, on: socket)
            let skimmedSentAt: UInt64? = socket.withPayload(of: span) { bytes in
                guard span.kind == .binary, let skimmed = SkimmedServerFrame.skim(bytes), skimmed.body == .envelope,
                    let payload = skimmed.payload, payload.count >= 8
                else { return nil }
                return bytes.loadUnaligned(fromByteOffset: payload.lowerBound, as: UInt64.self)
            }
            let sentAt: UInt64
            if let skimmedSentAt {
                sentAt = skimmedSentAt
            } else {
                guard let reply = try Self.decode(socket.frame(span)) else { continue }
                guard case .envelope(let envelope)? = reply.body, envelope.payload.count >= 8 else {
                    throw .unexpected("\(reply.body.map { "\($0)" } ?? "nothing") on a subscription")
                }
                sentAt = envelope.payload.prefix(8).withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
            }
            let now = DispatchTime.now().uptimeNanoseconds
            result.latenciesMs.append(Double(now &- sentAt) / 1_000_000)
            result.delivered += 1
        }
    }

    /// A binary frame's ack or envelope, read in place without decoding it.
    private static func skim(_ span: ServerFrameReader.FrameSpan, on socket: LoadSocket) -> SkimmedServerFrame? {
        guard span.kind == .binary else { return nil }
        return socket.withPayload(of: span) { SkimmedServerFrame.skim($0) }
    }

    private func answerPing(_ span: ServerFrameReader.FrameSpan, on socket: LoadSocket) throws(WireLoadError) {
        guard span.kind == .ping else { return }
        var pong: [UInt8] = []
        socket.withPayload(of: span) { ClientFrameEncoder.appendFrame($0, mask: nextMask(), opcode: 0xA, to: &pong) }
        try socket.send(pong)
    }
}
