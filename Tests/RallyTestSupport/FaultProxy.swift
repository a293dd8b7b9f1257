public import Foundation
import NIOCore
import NIOPosix

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A TCP proxy on a loopback port, between clients and a real relay, that
/// breaks the network on command: it passes bytes through, swallows them
/// (a dead network), holds them (a frozen one), trickles them (a slow
/// one), refuses connections, or blocks WebSocket upgrades.
///
/// It forwards raw bytes, so it carries HTTP and WebSocket alike and the
/// relay never knows it is there — except by origin: clients sign requests
/// and WebSocket authentication with the origin they connect to, here
/// ``url``. Start the relay behind it with `publicURL: proxy.url` (for
/// example `TestRelay.start(publicURL: proxy.url)`; add
/// `acceptsBindOrigins: true` when some clients reach the relay directly).
/// Since `upstreamPort` is only asked when a connection arrives, the proxy
/// can start first, hand its URL to the relay, and learn the relay's port
/// afterwards; a relay restarted on another port is found the same way.
///
/// What the modes do to a connection (see ``Mode``) is decided when it is
/// accepted, except that ``Mode/blackhole``, ``Mode/stall`` and
/// ``Mode/throttle(bytesPerSecond:)`` also act on the connections already
/// open, and ``Mode/refuse`` resets them.
///
/// Call ``stop()`` when done: the proxy owns an event loop thread.
public final class FaultProxy: Sendable {
    /// How the proxy treats traffic.
    public enum Mode: Sendable, Equatable {
        /// Forwards everything, both ways. Bytes that ``stall`` or
        /// ``throttle(bytesPerSecond:)`` held are passed on first, in order.
        case pass
        /// A dead network: connections are still accepted and existing ones
        /// stay open, but nothing crosses in either direction — bytes are
        /// read and dropped, and closes are held back. Going back to
        /// ``pass`` resumes forwarding on the connections still open; the
        /// bytes dropped meanwhile stay lost (unlike real TCP, which would
        /// retransmit them), so a protocol stream that lost bytes is
        /// usually garbage afterwards. A close held back is passed on then,
        /// as a retransmitted FIN or RST would be.
        case blackhole
        /// New connections are reset as soon as they are accepted (they
        /// count in ``FaultProxy/acceptedCount``); switching to this mode
        /// resets every open connection too.
        case refuse
        /// A network that blocks WebSockets: a new connection whose first
        /// request carries `Upgrade: websocket` is answered
        /// `403 Forbidden` (`Connection: close`) and closed; others pass.
        /// Only the first request on a connection is looked at (its head,
        /// up to 16 KiB): a keep-alive connection that upgrades on a later
        /// request gets through. URLSession and the WebSocket clients used
        /// here upgrade on a fresh connection. Open connections are left
        /// alone; call ``FaultProxy/resetAll()`` to drop them.
        case refuseWebSocketUpgrades
        /// A frozen network rather than a dead one: connections are still
        /// accepted (and the relay's side connected), but nothing crosses
        /// in either direction. Unlike ``blackhole`` nothing is lost: the
        /// bytes read are held, in order, and passed on when the mode
        /// allows again (``pass``, or at the throttled rate); closes are
        /// held back behind them. Each connection holds at most
        /// ``FaultProxy/stallCapacity`` bytes, both directions together
        /// (plus the one read that crossed it, at most 64 KiB); then the
        /// proxy stops reading from it, so the senders meet TCP
        /// backpressure once the kernel's buffers fill. Held bytes are
        /// lost only when a connection is reset (``refuse``,
        /// ``FaultProxy/resetAll()``, ``FaultProxy/stop()``) or its
        /// receiving side has closed; ``blackhole`` keeps them held.
        case stall
        /// A slow network: every connection forwards at most
        /// `bytesPerSecond` bytes a second in each direction. A token
        /// bucket per direction holds a tenth of a second's worth (at
        /// least one byte) and starts full; bytes beyond it wait in the
        /// proxy, and while any wait the proxy reads nothing more from
        /// their sender (TCP backpressure), so latency grows with what is
        /// queued ahead, as on a real slow link. Closes wait behind the
        /// bytes. `bytesPerSecond` must be positive.
        case throttle(bytesPerSecond: Int)
    }

    /// What ``Mode/stall`` holds per connection, both directions together,
    /// before it stops reading: 4 MiB.
    public static let stallCapacity = 4 * 1024 * 1024

    /// Counters for assertions. Bytes are counted as they are read from a
    /// side: dropped (``Mode/blackhole``), or passed on at once, or held
    /// first (``Mode/stall``, ``Mode/throttle(bytesPerSecond:)``) and
    /// counted as forwarded when written to the other side.
    public struct Statistics: Sendable, Equatable {
        /// Connections open now: accepted, and not yet closed on both the
        /// client's side and the relay's.
        public var connections = 0
        /// Connections accepted since the start, refused ones included.
        public var accepted = 0
        /// Bytes from clients dropped by ``Mode/blackhole``.
        public var droppedBytesToUpstream = 0
        /// Bytes from the relay dropped by ``Mode/blackhole``.
        public var droppedBytesToClients = 0
        /// Bytes from clients written on to the relay.
        public var forwardedBytesToUpstream = 0
        /// Bytes from the relay written on to clients.
        public var forwardedBytesToClients = 0
        /// Bytes from clients that had to wait (``Mode/stall``,
        /// ``Mode/throttle(bytesPerSecond:)``), counted once each when held.
        public var delayedBytesToUpstream = 0
        /// Bytes from the relay that had to wait, likewise.
        public var delayedBytesToClients = 0
        /// Bytes from clients held now, waiting to be passed on.
        public var heldBytesToUpstream = 0
        /// Bytes from the relay held now, waiting to be passed on.
        public var heldBytesToClients = 0
    }

    /// ``FaultProxy/waitUntil(timeout:_:)`` gave up.
    public struct Timeout: Error, CustomStringConvertible {
        public let statistics: Statistics
        public var description: String { "FaultProxy: condition not met in time; last \(statistics)" }
    }

    /// The loopback port the proxy listens on.
    public let port: Int
    private let group: MultiThreadedEventLoopGroup
    private let server: any Channel
    private let shared: SharedState

    private init(port: Int, group: MultiThreadedEventLoopGroup, server: any Channel, shared: SharedState) {
        self.port = port
        self.group = group
        self.server = server
        self.shared = shared
    }

    /// `http://127.0.0.1:<port>`: the URL (and origin) clients use.
    public var url: URL { URL(string: "http://127.0.0.1:\(port)")! }

    public var mode: Mode { shared.withLock { $0.mode } }

    public var statistics: Statistics { shared.withLock { $0.statistics } }

    /// Proxied connections open now (see ``Statistics/connections``).
    public var connectionCount: Int { statistics.connections }

    /// Connections accepted since the start, refused ones included.
    public var acceptedCount: Int { statistics.accepted }

    /// Listens on a free loopback port. `upstreamPort` names the relay's
    /// port on 127.0.0.1 and is asked anew for every connection accepted;
    /// a connection waits for it (reading nothing) until it answers.
    public static func start(upstreamPort: @escaping @Sendable () async -> Int) async throws -> FaultProxy {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let shared = SharedState()
        do {
            let server = try await ServerBootstrap(group: group)
                .serverChannelOption(ChannelOptions.backlog, value: 256)
                .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
                .childChannelOption(ChannelOptions.autoRead, value: false)
                .childChannelOption(ChannelOptions.allowRemoteHalfClosure, value: true)
                // One read (at most 64 KiB) per request: bounds what a read
                // brings in past the stall capacity.
                .childChannelOption(ChannelOptions.maxMessagesPerRead, value: 1)
                .childChannelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(
                            InboundGate(shared: shared, upstreamPort: upstreamPort))
                    }
                }
                .bind(host: "127.0.0.1", port: 0)
                .get()
            guard let port = server.localAddress?.port else { throw ChannelError.unknownLocalAddress }
            return FaultProxy(port: port, group: group, server: server, shared: shared)
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
    }

    /// Changes how traffic is treated, from now on (see ``Mode``).
    public func setMode(_ mode: Mode) {
        if case .throttle(let rate) = mode { precondition(rate > 0, "FaultProxy: throttle to a positive rate") }
        let links = shared.withLock { state in
            state.mode = mode
            return Array(state.links.values)
        }
        if mode == .refuse {
            for link in links { link.run { $0.reset() } }
        } else {
            for link in links { link.run { $0.modeChanged() } }
        }
    }

    /// Resets every open connection, on both sides (`SO_LINGER` 0, so the
    /// peers see a reset rather than an orderly close). Returns at once;
    /// wait for ``connectionCount`` to reach 0 if that matters.
    public func resetAll() {
        let links = shared.withLock { Array($0.links.values) }
        for link in links { link.run { $0.reset() } }
    }

    /// Returns once `condition` holds for ``statistics``, checked now and
    /// after every change; throws ``Timeout`` after `timeout`.
    public func waitUntil(
        timeout: Duration = .seconds(10), _ condition: @escaping @Sendable (Statistics) -> Bool
    ) async throws {
        let id = shared.withLock { state in
            defer { state.nextWaiterID += 1 }
            return state.nextWaiterID
        }
        let shared = self.shared
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try await withTaskCancellationHandler {
                    try await withCheckedThrowingContinuation { continuation in
                        shared.addWaiter(id, condition: condition, continuation: continuation)
                    }
                } onCancel: {
                    shared.cancelWaiter(id)
                }
            }
            group.addTask {
                try await Task.sleep(for: timeout)
                throw Timeout(statistics: shared.withLock { $0.statistics })
            }
            defer { group.cancelAll() }
            _ = try await group.next()
        }
    }

    /// Closes the listener and every connection (resetting them), and
    /// shuts the event loop down.
    public func stop() async {
        let links = shared.withLock { state in
            state.stopped = true
            return Array(state.links.values)
        }
        try? await server.close()
        for link in links { link.run { $0.reset() } }
        try? await waitUntil(timeout: .seconds(5)) { $0.connections == 0 }
        try? await group.shutdownGracefully()
    }
}

// MARK: - Shared state

/// What the public API and the event loop share.
///
/// `@unchecked Sendable`: `state` is only read and written inside
/// `lock.withLock` (through `withLock(_:)` and the methods below), whose
/// closures never escape, and continuations are resumed after the lock is
/// released. NSLock rather than `Synchronization.Mutex`, which needs macOS
/// 15 (the package targets 14), or `NIOLockedValueBox`, whose module this
/// target does not depend on.
private final class SharedState: @unchecked Sendable {
    struct Waiter {
        let condition: @Sendable (FaultProxy.Statistics) -> Bool
        let continuation: CheckedContinuation<Void, any Error>
    }

    struct State {
        var mode = FaultProxy.Mode.pass
        var stopped = false
        var statistics = FaultProxy.Statistics()
        var links: [ObjectIdentifier: Link] = [:]
        var waiters: [Int: Waiter] = [:]
        var cancelledWaiters: Set<Int> = []
        var nextWaiterID = 0
    }

    private let lock = NSLock()
    private var state = State()

    func withLock<Result>(_ body: (inout State) -> Result) -> Result {
        lock.withLock { body(&state) }
    }

    /// Changes `state`, then resumes the waiters whose condition now holds.
    func update(_ body: (inout State) -> Void) {
        let ready = lock.withLock {
            body(&state)
            let statistics = state.statistics
            let ready = state.waiters.filter { $0.value.condition(statistics) }
            for id in ready.keys { state.waiters[id] = nil }
            return ready.values.map(\.continuation)
        }
        for continuation in ready { continuation.resume() }
    }

    func addWaiter(
        _ id: Int, condition: @escaping @Sendable (FaultProxy.Statistics) -> Bool,
        continuation: CheckedContinuation<Void, any Error>
    ) {
        enum Outcome { case waiting, satisfied, cancelled }
        let outcome: Outcome = lock.withLock {
            if state.cancelledWaiters.remove(id) != nil { return .cancelled }
            if condition(state.statistics) { return .satisfied }
            state.waiters[id] = Waiter(condition: condition, continuation: continuation)
            return .waiting
        }
        switch outcome {
        case .waiting: break
        case .satisfied: continuation.resume()
        case .cancelled: continuation.resume(throwing: CancellationError())
        }
    }

    func cancelWaiter(_ id: Int) {
        let waiter: Waiter? = lock.withLock {
            guard let waiter = state.waiters.removeValue(forKey: id) else {
                // Not added yet: `addWaiter` will see this and not wait.
                state.cancelledWaiters.insert(id)
                return nil
            }
            return waiter
        }
        waiter?.continuation.resume(throwing: CancellationError())
    }

    /// Counts a connection as accepted, and registers it unless the proxy
    /// refuses it; nil: refused.
    func admit(_ link: Link) -> FaultProxy.Mode? {
        var mode: FaultProxy.Mode?
        update { state in
            state.statistics.accepted += 1
            guard !state.stopped, state.mode != .refuse else { return }
            state.links[link.id] = link
            state.statistics.connections = state.links.count
            mode = state.mode
        }
        return mode
    }

    func remove(_ id: ObjectIdentifier) {
        update { state in
            state.links[id] = nil
            state.statistics.connections = state.links.count
        }
    }

    var mode: FaultProxy.Mode { withLock { $0.mode } }

    /// The mode that applies to `bytes` just read from `side`; counts them
    /// as dropped if it is blackhole.
    func intake(_ bytes: Int, from side: Pair.Side) -> FaultProxy.Mode {
        let mode = self.mode
        if mode == .blackhole {
            update { state in
                switch side {
                case .inbound: state.statistics.droppedBytesToUpstream += bytes
                case .upstream: state.statistics.droppedBytesToClients += bytes
                }
            }
        }
        return mode
    }

    /// Counts bytes from `side`: `forwarded` written on, `delayed` newly
    /// held, and the change in what is held.
    func count(from side: Pair.Side, forwarded: Int = 0, delayed: Int = 0, heldChange: Int = 0) {
        guard forwarded != 0 || delayed != 0 || heldChange != 0 else { return }
        update { state in
            switch side {
            case .inbound:
                state.statistics.forwardedBytesToUpstream += forwarded
                state.statistics.delayedBytesToUpstream += delayed
                state.statistics.heldBytesToUpstream += heldChange
            case .upstream:
                state.statistics.forwardedBytesToClients += forwarded
                state.statistics.delayedBytesToClients += delayed
                state.statistics.heldBytesToClients += heldChange
            }
        }
    }
}

/// An open connection as the shared state knows it.
private struct Link: Sendable {
    let id: ObjectIdentifier
    let pair: NIOLoopBound<Pair>

    /// Runs `body` on the connection's event loop.
    func run(_ body: @escaping @Sendable (Pair) -> Void) {
        let pair = self.pair
        pair.eventLoop.execute { body(pair.value) }
    }
}

// MARK: - Connections

/// One proxied connection: the client's channel, and the relay's once
/// connected. Lives on the event loop both channels share.
private final class Pair {
    enum Side { case inbound, upstream }

    /// How a side ended, as far as passing it on goes.
    enum End: Comparable {
        /// The peer half-closed (FIN): the other side's output is closed.
        case eof
        /// The channel closed: the other side is closed too.
        case closed
    }

    /// Bytes read from one side and not yet written to the other (stall,
    /// throttle), and that direction's throttle.
    struct Direction {
        /// Oldest first.
        var held = CircularBuffer<ByteBuffer>()
        var heldBytes = 0
        var bucket: TokenBucket?
        /// The throttle's next drain, when bytes wait for tokens.
        var drain: Scheduled<Void>?
    }

    let shared: SharedState
    let upstreamPort: @Sendable () async -> Int
    let inbound: any Channel
    private(set) var upstream: (any Channel)?
    private var glue: [Side: GlueHandler] = [:]
    /// Bytes the client sent before the relay's channel was ready.
    var pendingPrefix: ByteBuffer
    /// The client half-closed before the relay's channel was ready.
    var pendingInboundEOF = false
    /// Ends held back (blackhole, stall, or behind held bytes), to pass on
    /// when they may cross.
    private var deferred: [Side: End] = [:]
    /// Keyed by the side the bytes came from.
    private var directions: [Side: Direction] = [.inbound: Direction(), .upstream: Direction()]
    private var connecting = false
    private var closed: Set<Side> = []
    private var resetting = false
    private var finished = false

    init(shared: SharedState, upstreamPort: @escaping @Sendable () async -> Int, inbound: any Channel) {
        self.shared = shared
        self.upstreamPort = upstreamPort
        self.inbound = inbound
        self.pendingPrefix = inbound.allocator.buffer(capacity: 0)
    }

    var isGlued: Bool { glue[.upstream] != nil }

    /// Asks for the relay's port and connects to it; on failure, closes
    /// the client's connection.
    func connectUpstream() {
        connecting = true
        let loop = inbound.eventLoop
        let bound = NIOLoopBound(self, eventLoop: loop)
        let upstreamPort = self.upstreamPort
        loop.makeFutureWithTask { await upstreamPort() }
            .flatMap { port in
                ClientBootstrap(group: loop)
                    .channelOption(ChannelOptions.autoRead, value: false)
                    .channelOption(ChannelOptions.allowRemoteHalfClosure, value: true)
                    .channelOption(ChannelOptions.maxMessagesPerRead, value: 1)
                    .connectTimeout(.seconds(10))
                    .connect(host: "127.0.0.1", port: port)
            }
            .whenComplete { result in bound.value.upstreamConnected(result) }
    }

    private func upstreamConnected(_ result: Result<any Channel, any Error>) {
        connecting = false
        guard case .success(let channel) = result else {
            inbound.close(promise: nil)
            checkFinished()
            return
        }
        upstream = channel
        let bound = NIOLoopBound(self, eventLoop: channel.eventLoop)
        channel.closeFuture.whenComplete { _ in bound.value.sideClosed(.upstream) }
        guard !resetting, !closed.contains(.inbound) else {
            Self.abort(channel)
            return
        }
        let inboundGlue = GlueHandler(pair: self, side: .inbound)
        let upstreamGlue = GlueHandler(pair: self, side: .upstream)
        do {
            try inbound.pipeline.syncOperations.addHandler(inboundGlue)
            try channel.pipeline.syncOperations.addHandler(upstreamGlue)
        } catch {
            reset()
            return
        }
        glue = [.inbound: inboundGlue, .upstream: upstreamGlue]
        if pendingPrefix.readableBytes > 0 {
            forward(pendingPrefix, from: .inbound)
            upstreamGlue.flush()
        }
        pendingPrefix = inbound.allocator.buffer(capacity: 0)
        if pendingInboundEOF { ended(.inbound, .eof) }
        inboundGlue.requestRead()
        upstreamGlue.requestRead()
    }

    /// Bytes read from `side`: dropped, written to the other side, or held.
    func forward(_ buffer: ByteBuffer, from side: Side) {
        let count = buffer.readableBytes
        guard count > 0 else { return }
        let mode = shared.intake(count, from: side)
        if mode == .blackhole { return }
        if mode.forwardsAtOnce, directions[side]!.heldBytes == 0 {
            // Unflushed: the read's end flushes.
            let written = glue[side.other]?.write(buffer) ?? false
            shared.count(from: side, forwarded: written ? count : 0)
            return
        }
        directions[side]!.held.append(buffer)
        directions[side]!.heldBytes += count
        let (written, removed) = drain(from: side, mode: mode)
        // What is still held is the newest bytes: these first of all.
        let delayed = min(count, directions[side]!.heldBytes)
        shared.count(from: side, forwarded: written, delayed: delayed, heldChange: count - removed)
        afterDrain(side)
    }

    /// Passes on what `side` sent that the mode now lets through, and any
    /// end held back behind it; then reads on from `side` if it may.
    func release(_ side: Side) {
        guard !finished else { return }
        let (written, removed) = drain(from: side, mode: shared.mode)
        shared.count(from: side, forwarded: written, heldChange: -removed)
        afterDrain(side)
    }

    /// The mode changed: passes on what it lets through.
    func modeChanged() {
        release(.inbound)
        release(.upstream)
    }

    /// Writes held bytes from `side` to the other side as far as `mode`
    /// allows, flushing; returns how many were written on, and how many
    /// left the hold (more when the other side is gone). A throttle
    /// schedules its next drain when bytes are left.
    private func drain(from side: Side, mode: FaultProxy.Mode) -> (written: Int, removed: Int) {
        guard directions[side]!.heldBytes > 0 else {
            if case .throttle = mode {} else { directions[side]!.bucket = nil }
            return (0, 0)
        }
        guard let target = glue[side.other] else { return (0, 0) }
        var direction = directions[side]!
        let before = direction.heldBytes
        var written = 0
        switch mode {
        case .blackhole, .stall:
            return (0, 0)
        case .pass, .refuse, .refuseWebSocketUpgrades:
            direction.bucket = nil
            direction.drain?.cancel()
            direction.drain = nil
            while let buffer = direction.held.popFirst() {
                if target.write(buffer) { written += buffer.readableBytes }
            }
            direction.heldBytes = 0
        case .throttle(let rate):
            let now = NIODeadline.now()
            var bucket = direction.bucket.flatMap { $0.rate == rate ? $0 : nil } ?? TokenBucket(rate: rate, now: now)
            bucket.refill(now: now)
            while target.isWritable, direction.heldBytes > 0, bucket.available > 0 {
                var first = direction.held.removeFirst()
                let length = min(first.readableBytes, bucket.available)
                let slice = first.readSlice(length: length)!
                if first.readableBytes > 0 { direction.held.prepend(first) }
                direction.heldBytes -= length
                bucket.take(length)
                if target.write(slice) { written += length }
            }
            direction.bucket = bucket
            // Not writable: the other side's writability change drains.
            if direction.heldBytes > 0, target.isWritable, direction.drain == nil {
                let wait = bucket.wait(for: min(direction.heldBytes, bucket.capacity))
                direction.drain = inbound.eventLoop.assumeIsolated().scheduleTask(in: wait) {
                    self.directions[side]!.drain = nil
                    self.release(side)
                }
            }
        }
        // Stored before flushing: a flush may make the other side writable
        // at once, which drains again.
        directions[side] = direction
        if written > 0 { target.flush() }
        return (written, before - direction.heldBytes)
    }

    /// Passes on an end held back behind `side`'s bytes once they are all
    /// out, and lets `side` read again if it may.
    private func afterDrain(_ side: Side) {
        if directions[side]!.heldBytes == 0, let end = deferred[side], !shared.mode.holdsEnds {
            deferred[side] = nil
            deliver(end, from: side)
        }
        glue[side]?.retryRead()
    }

    /// Whether to read from `side` now: the other side can take more, and
    /// the mode does not hold too much already.
    func mayRead(_ side: Side) -> Bool {
        guard glue[side.other]?.isWritable ?? false else { return false }
        switch shared.mode {
        case .stall:
            return directions[.inbound]!.heldBytes + directions[.upstream]!.heldBytes < FaultProxy.stallCapacity
        case .throttle:
            return directions[side]!.heldBytes == 0
        case .pass, .blackhole, .refuse, .refuseWebSocketUpgrades:
            return true
        }
    }

    /// The other side of `side` became writable: what `side` sent may go on.
    func writable(_ side: Side) { release(side.other) }

    func flush(_ side: Side) { glue[side]?.flush() }

    /// `side` ended: pass it on, or hold it back while the mode holds
    /// ends or bytes from `side` wait.
    func ended(_ side: Side, _ end: End) {
        guard !resetting else { return }
        if shared.mode.holdsEnds || directions[side]!.heldBytes > 0 || deferred[side] != nil {
            deferred[side] = max(deferred[side] ?? end, end)
        } else {
            deliver(end, from: side)
        }
    }

    private func deliver(_ end: End, from side: Side) {
        if let other = glue[side.other] {
            switch end {
            case .eof: other.closeOutputAfterFlush()
            case .closed: other.closeAfterFlush()
            }
        } else if side == .upstream || end == .closed {
            // Not glued (yet): the client's connection has nothing to flush.
            inbound.close(promise: nil)
        }
    }

    /// Closes both sides abruptly.
    func reset() {
        resetting = true
        Self.abort(inbound)
        if let upstream { Self.abort(upstream) }
    }

    /// A channel's close future fired.
    func sideClosed(_ side: Side) {
        closed.insert(side)
        checkFinished()
    }

    private func checkFinished() {
        guard !finished, !connecting, closed.contains(.inbound), upstream == nil || closed.contains(.upstream)
        else { return }
        finished = true
        glue = [:]
        for side in [Side.inbound, .upstream] {
            let direction = directions[side]!
            direction.drain?.cancel()
            shared.count(from: side, heldChange: -direction.heldBytes)
            directions[side] = Direction()
        }
        shared.remove(ObjectIdentifier(self))
    }

    /// Closes with SO_LINGER 0: the peer sees a reset.
    static func abort(_ channel: any Channel) {
        if let options = channel as? any SocketOptionProvider {
            _ = options.setSoLinger(linger(l_onoff: 1, l_linger: 0))
        }
        channel.close(promise: nil)
    }
}

extension Pair.Side {
    fileprivate var other: Pair.Side { self == .inbound ? .upstream : .inbound }
}

extension FaultProxy.Mode {
    /// Bytes read are written on at once (when none are held before them).
    fileprivate var forwardsAtOnce: Bool {
        switch self {
        case .pass, .refuse, .refuseWebSocketUpgrades: true
        case .blackhole, .stall, .throttle: false
        }
    }

    /// Closes are held back rather than passed on.
    fileprivate var holdsEnds: Bool { self == .blackhole || self == .stall }
}

/// A throttle's allowance for one direction of one connection: refills at
/// `rate` bytes a second up to a tenth of a second's worth (at least one
/// byte), and starts full.
private struct TokenBucket {
    let rate: Int
    let capacity: Int
    private var tokens: Double
    private var refilled: NIODeadline

    init(rate: Int, now: NIODeadline) {
        self.rate = rate
        capacity = max(1, rate / 10)
        tokens = Double(capacity)
        refilled = now
    }

    /// Whole bytes that may go now.
    var available: Int { Int(tokens) }

    mutating func refill(now: NIODeadline) {
        let elapsed = Double((now - refilled).nanoseconds) / 1e9
        tokens = min(Double(capacity), tokens + max(0, elapsed) * Double(rate))
        refilled = now
    }

    mutating func take(_ bytes: Int) { tokens -= Double(bytes) }

    /// How long until `bytes` may go (at least a millisecond).
    func wait(for bytes: Int) -> TimeAmount {
        let missing = max(0, Double(bytes) - tokens)
        let nanoseconds = (missing / Double(rate) * 1e9).rounded(.up)
        return .nanoseconds(max(1_000_000, Int64(nanoseconds)))
    }
}

/// One side of a pair: reads from its channel and hands the bytes to the
/// pair, which writes them to the other side or holds them. Reads are
/// asked for one at a time (auto-read is off), and only while the pair
/// allows (``Pair/mayRead(_:)``): the other side's write buffer, and what
/// the pair holds, cap what is in flight.
private final class GlueHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let side: Pair.Side
    private var pair: Pair?
    private var context: ChannelHandlerContext?
    /// A read was asked for and not allowed yet.
    private var pendingRead = false

    init(pair: Pair, side: Pair.Side) {
        self.pair = pair
        self.side = side
    }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        pair = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        pair?.forward(unwrapInboundIn(data), from: side)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        pair?.flush(side.other)
        requestRead()
        context.fireChannelReadComplete()
    }

    func channelInactive(context: ChannelHandlerContext) {
        pair?.ended(side, .closed)
        context.fireChannelInactive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, event == .inputClosed { pair?.ended(side, .eof) }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { pair?.writable(side) }
        context.fireChannelWritabilityChanged()
    }

    /// Reads once more, now if the pair allows, else once it does (see
    /// ``retryRead()``).
    func requestRead() {
        guard let context, let pair else { return }
        if pair.mayRead(side) {
            pendingRead = false
            context.read()
        } else {
            pendingRead = true
        }
    }

    /// Something changed that may allow a read asked for earlier.
    func retryRead() {
        if pendingRead { requestRead() }
    }

    var isWritable: Bool { context?.channel.isWritable ?? false }

    /// Writes without flushing; false when the channel is gone.
    func write(_ buffer: ByteBuffer) -> Bool {
        guard let context else { return false }
        context.write(wrapOutboundOut(buffer), promise: nil)
        return true
    }

    func flush() { context?.flush() }

    /// Half-closes once what was written has gone out (an empty write is
    /// the barrier: NIO escalates a half-close to a full one, dropping
    /// pending writes, when the input is already closed).
    func closeOutputAfterFlush() {
        guard let context else { return }
        context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(capacity: 0)))
            .assumeIsolated().whenComplete { _ in context.close(mode: .output, promise: nil) }
    }

    func closeAfterFlush() {
        guard let context else { return }
        context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(capacity: 0)))
            .assumeIsolated().whenComplete { _ in context.close(promise: nil) }
    }
}

/// First in a client's pipeline: admits or refuses the connection when it
/// becomes active and, when WebSocket upgrades are refused, holds its first
/// request head back until it is judged. Once the connection is passed on,
/// it forwards everything to the glue behind it (or to the pair's prefix,
/// while the relay's channel is not ready).
private final class InboundGate: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    static let maxHeadBytes = 16 * 1024
    static let rejection = "HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"

    private enum Phase {
        case inspecting(ByteBuffer)
        case rejected
        case passing
    }

    private let shared: SharedState
    private let upstreamPort: @Sendable () async -> Int
    private var pair: Pair?
    private var phase = Phase.passing

    init(shared: SharedState, upstreamPort: @escaping @Sendable () async -> Int) {
        self.shared = shared
        self.upstreamPort = upstreamPort
    }

    func channelActive(context: ChannelHandlerContext) {
        context.fireChannelActive()
        let channel = context.channel
        let pair = Pair(shared: shared, upstreamPort: upstreamPort, inbound: channel)
        let bound = NIOLoopBound(pair, eventLoop: channel.eventLoop)
        guard let mode = shared.admit(Link(id: ObjectIdentifier(pair), pair: bound)) else {
            Pair.abort(channel)
            return
        }
        self.pair = pair
        channel.closeFuture.whenComplete { _ in bound.value.sideClosed(.inbound) }
        if mode == .refuseWebSocketUpgrades {
            phase = .inspecting(channel.allocator.buffer(capacity: 1024))
            context.read()
        } else {
            pair.connectUpstream()
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch phase {
        case .passing:
            guard let pair, !pair.isGlued else { return context.fireChannelRead(data) }
            var buffer = unwrapInboundIn(data)
            pair.pendingPrefix.writeBuffer(&buffer)
        case .rejected:
            break
        case .inspecting(var head):
            var buffer = unwrapInboundIn(data)
            head.writeBuffer(&buffer)
            phase = .inspecting(head)
            judge(head, context: context)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        switch phase {
        case .passing: context.fireChannelReadComplete()
        // Inspecting: the head is not complete yet. Rejected: drains until
        // the client closes.
        case .inspecting, .rejected: context.read()
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard let event = event as? ChannelEvent, event == .inputClosed else {
            return context.fireUserInboundEventTriggered(event)
        }
        switch phase {
        case .passing:
            if let pair, !pair.isGlued {
                pair.pendingInboundEOF = true
            } else {
                context.fireUserInboundEventTriggered(event)
            }
        case .inspecting, .rejected:
            context.close(promise: nil)
        }
    }

    private func judge(_ head: ByteBuffer, context: ChannelHandlerContext) {
        let bytes = head.readableBytesView
        let terminator: [UInt8] = Array("\r\n\r\n".utf8)
        let end = bytes.firstRange(of: terminator)?.upperBound
        guard end != nil || bytes.count >= Self.maxHeadBytes else { return }
        let headBytes = bytes[..<(end ?? bytes.endIndex)]
        if Self.requestsWebSocketUpgrade(String(decoding: headBytes, as: UTF8.self)) {
            reject(context: context)
        } else {
            phase = .passing
            pair?.pendingPrefix = head
            pair?.connectUpstream()
        }
    }

    private func reject(context: ChannelHandlerContext) {
        phase = .rejected
        let response = context.channel.allocator.buffer(string: Self.rejection)
        context.writeAndFlush(wrapOutboundOut(response)).assumeIsolated().whenComplete { _ in
            context.close(mode: .output, promise: nil)
        }
        // Reads on until the client closes; one that never does is closed.
        context.eventLoop.assumeIsolated().scheduleTask(in: .seconds(5)) { context.close(promise: nil) }
    }

    /// Whether a request head has an `Upgrade` header naming `websocket`
    /// (names and values compared case-insensitively).
    static func requestsWebSocketUpgrade(_ head: String) -> Bool {
        for line in head.split(whereSeparator: \.isNewline).dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            guard line[..<colon].trimmingCharacters(in: .whitespaces).lowercased() == "upgrade" else { continue }
            let protocols = line[line.index(after: colon)...].split(separator: ",")
            if protocols.contains(where: { $0.trimmingCharacters(in: .whitespaces).lowercased() == "websocket" }) {
                return true
            }
        }
        return false
    }
}
