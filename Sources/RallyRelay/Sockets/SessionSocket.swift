import Foundation
import NIOCore
import NIOWebSocket
import RallyWire
import ServiceLifecycle
import Synchronization

/// One `/v1/ws` connection: the transport shell around a ``RelaySession``
/// on the relay's own WebSocket handlers (docs/adr/0025).
///
/// An idle connection holds no task of its own beyond the one that pumps
/// its publish acks: received messages wait in a queue that a short task
/// drains in order and ends with, so a connection's memory does not keep
/// the depth of its deepest call for as long as it is open (ADR 0022).
final class SessionSocket: Sendable {
    /// Received messages queued beyond this stop the socket's reads until
    /// the queue is down to `resumeReadingAt`: a client that floods is held
    /// back by TCP, not by the relay's memory.
    static let maxQueuedMessages = 64
    static let resumeReadingAt = 16

    /// How many bytes may wait to be written before sends wait (and how
    /// few before they go on): a few of the largest frames, so a burst to
    /// a client that reads (a welcome, then the log entry it checks) goes
    /// out at once, and at most about 1 MiB waits for one that does not.
    /// NIO's default, 64 KiB, is a quarter of one large frame: with it every
    /// large frame made the next one wait for the client's reads, and on a
    /// loaded machine 50 joiners' p99 rose from about 300 to 550 ms.
    static let writeBufferWaterMark = ChannelOptions.Types.WriteBufferWaterMark(
        low: 512 * 1024, high: 1024 * 1024)

    enum Message: Sendable {
        case binary(Data)
        /// A message the event loop decoded already (and did not take).
        case frame(WireClientFrame)
        case text
    }

    struct Closed: Error {}

    let channel: any Channel
    let services: RelayServices
    let remoteIP: String
    let session: RelaySession
    private let writer: SocketWriter
    /// Nothing reaches the session before its challenge went out: the
    /// inbox starts taking at ``run()``.
    private let inbox = Mutex(SocketInbox<Message>(pauseAt: maxQueuedMessages, resumeAt: resumeReadingAt))

    init(channel: any Channel, services: RelayServices, remoteIP: String) {
        self.channel = channel
        self.services = services
        self.remoteIP = remoteIP
        let writer = SocketWriter(channel: channel)
        self.writer = writer
        session = RelaySession(
            services: services, remoteIP: remoteIP, send: { frame in try await writer.send(frame) },
            sendEncoded: { buffer in try await writer.send(encoded: buffer) },
            writeLive: { buffer in writer.writeLive(buffer) })
        // The close future, not `channelInactive`: it also completes for a
        // socket that closed before its handlers were added.
        channel.closeFuture.whenComplete { _ in self.socketClosed() }
    }

    // MARK: The connection's life

    /// Runs the connection until it ends: admission, the challenge, then
    /// publish acks until the session closes. Called once, by the server's
    /// task for this connection.
    func run() async {
        guard await admitted() else { return }
        defer { services.connections.release(ip: remoteIP) }
        services.metrics.openConnections.increment()
        defer { services.metrics.openConnections.decrement() }
        guard await challenged() else { return }
        startTakingMessages()
        await serve()
        await finish()
    }

    // The steps of `run` are functions of their own, never inlined: the
    // connection's task keeps `run`'s frame for as long as the connection
    // lives, so it holds only what the steps share (10,000 idle
    // connections took 19 MiB more with all of them in one frame).

    /// Counted against the connection limits, or refused before the
    /// challenge (the error frame is then the only one).
    @inline(never)
    private func admitted() async -> Bool {
        guard case .refused(let reason) = services.connections.admit(ip: remoteIP) else { return true }
        try? await send(services.errorFrame(RelayFailure(.tooManyConnections, reason), requestID: 0))
        closeSocket(code: .normalClosure)
        return false
    }

    @inline(never)
    private func challenged() async -> Bool {
        await services.sessions.add(session, authDeadline: .now + services.limits.authTimeout)
        do {
            try await send(session.challengeFrame)
            return true
        } catch {
            await services.sessions.remove(session)
            await session.close()
            closeSocket(code: .normalClosure)
            return false
        }
    }

    @inline(never)
    private func serve() async {
        let session = session
        await withGracefulShutdownHandler {
            // Ends when the session closes: the socket closed, a fatal
            // frame, or a deadline (the relay's sweep ends the session's
            // ack stream).
            await session.pumpAcks()
        } onGracefulShutdown: {
            Task {
                await session.shuttingDown()
                await session.endConnection()
            }
        }
    }

    @inline(never)
    private func finish() async {
        // The shutdown may have ended the pump before the notice in
        // `serve` ran: send it now, before the socket closes, so the client
        // reconnects with jitter instead of counting a failure.
        if Task.isShuttingDownGracefully { await session.shuttingDown() }
        await services.sessions.remove(session)
        await session.close()
        closeSocket(code: .normalClosure)
        try? await channel.closeFuture.get()
    }

    /// The socket closed (either side): nothing more is sent, and the
    /// session closes, which ends the ack pump and with it `run`. What was
    /// received before the close is still handled, in order: a client may
    /// publish and hang up at once, and its publish is committed.
    func socketClosed() {
        writer.socketClosed()
        let session = session
        Task { await session.close() }
    }

    /// How long a close frame may take to go out (behind whatever is
    /// queued before it) before the socket is closed anyway.
    static let closeTimeout: TimeAmount = .seconds(5)

    /// Sends a close frame after what is queued, then closes the socket,
    /// at the latest after ``closeTimeout`` (a client that stopped reading
    /// cannot hold it open).
    func closeSocket(code: WebSocketErrorCode) {
        // Nothing follows the close frame: an ack of a publish taken on
        // the loop may still complete after it.
        writer.socketClosed()
        Self.close(channel, code: code)
    }

    static func close(_ channel: any Channel, code: WebSocketErrorCode) {
        channel.eventLoop.execute {
            guard channel.isActive else { return }
            var data = channel.allocator.buffer(capacity: 2)
            data.write(webSocketErrorCode: code)
            let deadline = channel.eventLoop.scheduleTask(in: closeTimeout) { channel.close(promise: nil) }
            channel.writeAndFlush(WebSocketFrame(fin: true, opcode: .connectionClose, data: data)).whenComplete { _ in
                deadline.cancel()
                channel.close(promise: nil)
            }
        }
    }

    // MARK: Receiving

    /// A binary message from the socket, on its event loop. A publish that
    /// arrives while nothing else of this connection waits is checked and
    /// queued for the writer right here, and answered from the commit
    /// (ADR 0028); everything else, and a publish while the socket cannot
    /// take more writes, goes to the session in order.
    func receivedOnLoop(_ message: Data) {
        guard channel.isWritable, inbox.withLock({ $0.isIdle }),
            let decoded = try? FrameCodec.decodeClientFrameOrPublish(message)
        else {
            // Undecodable ones too: the session answers with the error.
            received(.binary(message))
            return
        }
        switch decoded {
        case .publish(let requestID, let publish):
            publishOnLoop(publish, requestID: requestID)
        case .frame(let frame):
            guard case .publish(let publish)? = frame.body else {
                received(.frame(frame))
                return
            }
            publishOnLoop(publish, requestID: frame.requestID)
        }
    }

    private func publishOnLoop(_ publish: WirePublish, requestID: UInt64) {
        let writer = writer
        let services = services
        guard
            let refusal = session.publishOnLoop(
                publish, requestID: requestID, loop: channel.eventLoop, answer: { writer.writeNow($0) })
        else { return }
        if refusal.isFatal {
            // The session sends the error and ends the connection, in order.
            received(.frame(WireClientFrame(requestID: requestID, publish: publish)))
        } else {
            writer.writeNow(.refused(services.errorFrame(refusal, requestID: requestID)))
        }
    }

    /// A message from the socket (on its event loop), queued for the
    /// session in the order received.
    func received(_ message: Message) {
        let (startDrain, pauseReading) = inbox.withLock { $0.receive(message) }
        if pauseReading { setReading(false) }
        if startDrain { Task { await self.drain() } }
    }

    /// Lets messages through without the challenge and the ack pump of
    /// ``run()``: for tests that drive a socket on an embedded channel.
    func startTakingMessagesForTesting() {
        startTakingMessages()
    }

    private func startTakingMessages() {
        if inbox.withLock({ $0.start() }) { Task { await self.drain() } }
    }

    /// Hands queued messages to the session one at a time, in order, and
    /// ends when the queue is empty.
    private func drain() async {
        while true {
            let (next, resumeReading) = inbox.withLock { $0.next() }
            if resumeReading { setReading(true) }
            guard let next else { return }
            if await handle(next) == .close {
                // A fatal frame went out: stop taking messages and end the
                // session's ack stream, which ends `run` and the socket.
                inbox.withLock { $0.close() }
                await session.endConnection()
                return
            }
        }
    }

    private func handle(_ message: Message) async -> SessionDisposition {
        switch message {
        case .binary(let message):
            return await session.receive(message)
        case .frame(let frame):
            return await session.receive(frame)
        case .text:
            return await session.reject(RelayFailure(.malformedFrame, "frames are binary protobuf messages, not text"))
        }
    }

    private func setReading(_ on: Bool) {
        let channel = channel
        channel.eventLoop.execute {
            _ = channel.setOption(ChannelOptions.autoRead, value: on)
            if on { channel.read() }
        }
    }

    // MARK: Sending

    func send(_ frame: WireServerFrame) async throws { try await writer.send(frame) }

    /// The socket's writability changed (on its event loop).
    func writabilityChanged() { writer.writabilityChanged() }

    /// On the loop, once the upgrade has added the WebSocket frame encoder:
    /// frames are then framed by the writer and written below it.
    func writeBelow(encoder context: ChannelHandlerContext) { writer.writeBelow(encoder: context) }
}

/// Writes a session's frames to its socket: on its event loop directly,
/// from anywhere else through the loop's outbox.
private final class SocketWriter: OutboxWriter {
    private struct State {
        var closed = false
        var nextWaiter: UInt64 = 0
        var writabilityWaiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
    }

    let channel: any Channel
    private let outbox: LoopOutbox
    private let state = Mutex(State())

    /// The context of the pipeline's WebSocket frame encoder, once the
    /// upgrade has put it there: a frame written on it skips the encoder,
    /// framed when encoded (``ByteBuffer/webSocketServerFrame(length:_:)``), so it
    /// reaches the socket as one buffer. Until then (and on a test's
    /// embedded channel) frames go through the encoder.
    private let belowEncoder: NIOLoopBoundBox<ChannelHandlerContext?>
    /// The outbox wrote frames that no flush has sent yet.
    private let outboxAwaitsFlush: NIOLoopBoundBox<Bool>

    init(channel: any Channel) {
        self.channel = channel
        outbox = LoopOutbox.of(channel.eventLoop)
        belowEncoder = NIOLoopBoundBox.makeEmptyBox(valueType: ChannelHandlerContext.self, eventLoop: channel.eventLoop)
        outboxAwaitsFlush = NIOLoopBoundBox(false, eventLoop: channel.eventLoop)
    }

    /// On the loop, once the upgrade has added the frame encoder.
    func writeBelow(encoder context: ChannelHandlerContext) {
        belowEncoder.value = context
    }

    /// Writes one frame, waiting first while the socket's outbound buffer
    /// is full: a subscriber that does not read holds up its own feed (whose
    /// hub buffer then overflows into SLOW_CONSUMER), not the relay.
    func send(_ frame: WireServerFrame) async throws {
        try await waitUntilWritable()
        write(.webSocketServerFrame(encoding: frame))
    }

    /// Writes a frame without waiting: an answer to a publish taken on the
    /// event loop, which took it only while the socket could take writes.
    func writeNow(_ answer: PublishAnswer) {
        guard !state.withLock({ $0.closed }) else { return }
        write(answer.encoded)
    }

    /// Writes a live envelope the hub hands over from a commit, if the
    /// socket can take it now. Always through the loop's outbox, even on
    /// the loop: a frame a feed wrote from another thread waits there, and
    /// this one must go out after it. Nothing goes out after the close
    /// frame, which closing queues once `closed` is set.
    func writeLive(_ buffer: ByteBuffer) -> Bool {
        guard !state.withLock({ $0.closed }), channel.isWritable else { return false }
        outbox.send(buffer, by: self, isLive: true)
        return true
    }

    /// Writes a WebSocket frame encoded once for several sockets: the
    /// buffer's bytes are shared, not copied.
    func send(encoded: ByteBuffer) async throws {
        try await waitUntilWritable()
        write(encoded)
    }

    private func write(_ buffer: ByteBuffer) {
        guard channel.eventLoop.inEventLoop else {
            outbox.send(buffer, by: self, isLive: false)
            return
        }
        emit(buffer)
        flush()
    }

    func writeWithoutFlush(_ frame: ByteBuffer, isLive: Bool) -> Bool {
        if isLive, state.withLock({ $0.closed }) { return false }
        emit(frame)
        guard !outboxAwaitsFlush.value else { return false }
        outboxAwaitsFlush.value = true
        return true
    }

    func flushOutbox() {
        outboxAwaitsFlush.value = false
        flush()
    }

    /// On the loop: one binary frame, after everything written before it.
    /// Every buffer here is a whole WebSocket frame, header included
    /// (``ByteBuffer/webSocketServerFrame(length:_:)``), so below the
    /// encoder it goes out as it is.
    private func emit(_ frame: ByteBuffer) {
        if let context = belowEncoder.value {
            context.write(NIOAny(frame), promise: nil)
        } else {
            channel.write(WebSocketFrame(fin: true, opcode: .binary, data: frame.webSocketServerMessage), promise: nil)
        }
    }

    /// Below the encoder too, when the frames were: straight to the head.
    func flush() {
        if let context = belowEncoder.value {
            context.flush()
        } else {
            channel.flush()
        }
    }

    func writabilityChanged() {
        guard channel.isWritable else { return }
        resumeWaiters()
    }

    func socketClosed() {
        state.withLock { $0.closed = true }
        resumeWaiters()
    }

    private func resumeWaiters() {
        let waiters = state.withLock { state in
            defer { state.writabilityWaiters.removeAll() }
            return Array(state.writabilityWaiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    private func waitUntilWritable() async throws {
        if state.withLock({ $0.closed }) { throw SessionSocket.Closed() }
        if channel.isWritable { return }
        let id = state.withLock { state in
            defer { state.nextWaiter += 1 }
            return state.nextWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state -> Bool in
                    // Checked under the lock the writability handler takes,
                    // so a change between the check and the wait is seen.
                    if state.closed || channel.isWritable || Task.isCancelled { return true }
                    state.writabilityWaiters[id] = waiter
                    return false
                }
                if resumeNow { waiter.resume() }
            }
        } onCancel: {
            state.withLock { $0.writabilityWaiters.removeValue(forKey: id) }?.resume()
        }
        if state.withLock({ $0.closed }) { throw SessionSocket.Closed() }
        try Task.checkCancellation()
    }
}

/// The one inbound handler of a `/v1/ws` pipeline: reads the client's
/// frames from the socket's bytes (``ClientFrameReader``), hands whole
/// messages to the session and answers control frames here.
final class SessionSocketHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = WebSocketFrame

    /// Fragments one message may come in.
    static let maxFragments = 1024

    private let socket: SessionSocket
    private var reader: ClientFrameReader
    /// The client's close arrived, or its frames could not be read: what
    /// follows is not read.
    private var isDone = false

    init(socket: SessionSocket, maxMessageBytes: Int) {
        self.socket = socket
        reader = ClientFrameReader(maxMessageBytes: maxMessageBytes, maxFragments: Self.maxFragments)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !isDone else { return }
        reader.append(unwrapInboundIn(data))
        do {
            while !isDone, let event = try reader.next() {
                handle(event, context: context)
            }
        } catch {
            // A message over the transport limit (1009), or a frame RFC
            // 6455 says fails the connection (1002).
            isDone = true
            socket.closeSocket(code: error.closeCode)
        }
    }

    private func handle(_ event: ClientFrameReader.Event, context: ChannelHandlerContext) {
        switch event {
        case .binary(let message):
            socket.receivedOnLoop(message)
        case .text:
            socket.received(.text)
        case .ping(let payload):
            context.writeAndFlush(
                wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, data: payload)), promise: nil)
        case .pong:
            break
        case .close(let code):
            // Answer the client's close with its own code, then close.
            isDone = true
            socket.closeSocket(code: code ?? .normalClosure)
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        socket.writabilityChanged()
        context.fireChannelWritabilityChanged()
    }

    /// The reader's own failures are handled in `channelRead`; what comes
    /// here is the socket's (a read that failed) or another handler's.
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        socket.closeSocket(code: .protocolError)
    }
}
