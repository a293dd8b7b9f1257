import Foundation
import RallyWire

/// The call rooms of a running relay: the pure ``RoomRegistry`` plus, for
/// each participant, the connection that carries its frames. Both
/// transports (a WebSocket, or HTTP requests and long polls) read one
/// mailbox per participant, so the rules and the delivery are the same on
/// either (docs/adr/0018).
actor RoomHub {
    /// How a participant's frames reach it.
    enum Transport: Sendable {
        case socket
        /// HTTP: the participant counts as connected while it polls; after
        /// `RoomHub.pollPresence` without a poll, its connection dropped.
        case poll
    }

    /// Frames queued for one participant before it counts as too slow and
    /// its connection is dropped (it rejoins with its token).
    static let maxQueuedFrames = 256
    /// How long an HTTP participant may go without polling.
    static let pollPresence: Duration = .seconds(10)

    private struct Attachment {
        let room: String
        let connection: UInt64
        let transport: Transport
        var queue: [(seq: UInt64, frame: Data)] = []
        var nextSeq: UInt64 = 1
        var waiter: CheckedContinuation<Void, Never>?
        var lastPoll: Date
        /// The room is gone: after the queued frames, the connection ends.
        var closing = false
    }

    private var registry: RoomRegistry
    private let clock: any RelayClock
    private var attachments: [String: Attachment] = [:]
    private var nextConnection: UInt64 = 1

    init(limits: RoomLimits, clock: any RelayClock, makeID: @escaping @Sendable () -> String = RoomRegistry.randomID) {
        registry = RoomRegistry(limits: limits, makeID: makeID)
        self.clock = clock
    }

    var limits: RoomLimits { registry.limits }
    var roomCount: Int { registry.rooms.count }

    func create() -> Result<Room, RoomRefusal> {
        tick()
        return registry.create(now: clock.now)
    }

    enum Status: Equatable {
        case live(participants: Int)
        case refused(RoomRefusal)
    }

    func status(_ roomID: String) -> Status {
        tick()
        if let room = registry.rooms[roomID] { return .live(participants: room.present.count) }
        return .refused(registry.refusalForMissing(roomID))
    }

    struct Joined: Sendable {
        let participant: String
        let token: String
        let connection: UInt64
        let frame: RoomServerFrame
    }

    /// Joins (or with a token rejoins) and attaches the participant's new
    /// connection; an older connection of the same participant is ended.
    func join(_ roomID: String, token: String?, transport: Transport) -> Result<Joined, RoomRefusal> {
        tick()
        switch registry.join(roomID, token: token, now: clock.now) {
        case .failure(let refusal): return .failure(refusal)
        case .success(let (participant, notices)):
            if var old = attachments[participant.id] {
                old.closing = true
                old.queue = []
                attachments[participant.id] = old
                wake(participant.id)
            }
            let connection = nextConnection
            nextConnection += 1
            attachments[participant.id] = Attachment(
                room: roomID, connection: connection, transport: transport, lastPoll: clock.now)
            deliver(notices, except: participant.id)
            let peers = (registry.rooms[roomID]?.present ?? [])
                .filter { $0.id != participant.id }
                .map { RoomServerFrame.Peer(participant: $0.id, state: $0.state.rawValue) }
            let frame = RoomServerFrame.joined(participant: participant.id, token: participant.token, peers: peers)
            return .success(
                Joined(participant: participant.id, token: participant.token, connection: connection, frame: frame))
        }
    }

    /// Ends a room by its creator's end token.
    func end(_ roomID: String, endToken: String) -> Result<Void, RoomRefusal> {
        tick()
        switch registry.end(roomID, endToken: endToken, now: clock.now) {
        case .failure(let refusal): return .failure(refusal)
        case .success(let notices):
            deliver(notices, except: nil)
            return .success(())
        }
    }

    /// The participant a reconnect token names in a room, for the HTTP
    /// transport (whose requests carry the token, never the id alone).
    func participant(room roomID: String, token: String) -> (id: String, connection: UInt64)? {
        guard
            let participant = registry.rooms[roomID]?.participants.first(where: {
                $0.token == token && $0.state != .gone
            }),
            let attachment = attachments[participant.id], attachment.room == roomID
        else { return nil }
        return (participant.id, attachment.connection)
    }

    /// Handles a frame after `join`; returns the immediate answer, if any.
    func receive(_ frame: RoomClientFrame, from participant: String, connection: UInt64) -> RoomServerFrame? {
        tick()
        guard let attachment = attachments[participant], attachment.connection == connection, !attachment.closing else {
            return .error(
                code: RoomRefusal.notInRoom.code, message: "this connection no longer holds a place in the room")
        }
        let now = clock.now
        switch frame {
        case .join:
            return .error(code: "already_joined", message: "this connection has joined already")
        case .ping:
            return .pong
        case .signal(let recipient, let data):
            switch registry.signal(attachment.room, from: participant, to: recipient, size: data.utf8.count) {
            case .failure(let refusal): return Self.frame(for: refusal)
            case .success:
                enqueue(RoomFrameCodec.encode(RoomServerFrame.signal(from: participant, data: data)), for: recipient)
                return nil
            }
        case .leave:
            switch registry.leave(attachment.room, participant: participant, now: now) {
            case .failure(let refusal): return Self.frame(for: refusal)
            case .success(let notices):
                finish(participant)
                deliver(notices, except: participant)
                return nil
            }
        case .end:
            switch registry.end(attachment.room, participant: participant, now: now) {
            case .failure(let refusal): return Self.frame(for: refusal)
            case .success(let notices):
                deliver(notices, except: nil)
                return nil
            }
        }
    }

    /// The participant's connection closed.
    func detach(_ participant: String, connection: UInt64) {
        guard let attachment = attachments[participant], attachment.connection == connection else { return }
        attachments[participant] = nil
        attachment.waiter?.resume()
        guard !attachment.closing else { return }
        deliver(registry.disconnected(attachment.room, participant: participant, now: clock.now), except: participant)
    }

    /// The frames after `after` (which the reader has seen), waiting up to
    /// `wait` for one; nil when this connection is over (replaced, left or
    /// its room gone, with every frame read).
    func frames(
        for participant: String, connection: UInt64, after: UInt64, wait: Duration
    ) async -> [(seq: UInt64, frame: Data)]? {
        guard var attachment = attachments[participant], attachment.connection == connection else { return nil }
        attachment.queue.removeAll { $0.seq <= after }
        attachment.lastPoll = clock.now
        attachments[participant] = attachment
        if attachment.queue.isEmpty, !attachment.closing, wait > .zero {
            let waitTask = Task { [weak self] in
                try? await Task.sleep(for: wait)
                await self?.wake(participant)
            }
            await withCheckedContinuation { continuation in
                attachments[participant]?.waiter?.resume()
                attachments[participant]?.waiter = continuation
            }
            waitTask.cancel()
        }
        guard var current = attachments[participant], current.connection == connection else { return nil }
        current.lastPoll = clock.now
        attachments[participant] = current
        if current.queue.isEmpty, current.closing {
            attachments[participant] = nil
            return nil
        }
        return Array(current.queue.prefix(RoomWireLimits.maxFramesPerPoll))
    }

    /// Lets time pass on the relay's clock: lapsed suspensions, idle rooms
    /// and HTTP participants that stopped polling.
    func tick() {
        let now = clock.now
        let presence = TimeInterval(Self.pollPresence.milliseconds) / 1000
        for (participant, attachment) in attachments
        where attachment.transport == .poll && !attachment.closing && attachment.waiter == nil
            && now.timeIntervalSince(attachment.lastPoll) >= presence
        {
            detach(participant, connection: attachment.connection)
        }
        deliver(registry.tick(now: now), except: nil)
    }

    /// Ends every connection (the relay is stopping).
    func shutdown() {
        for participant in attachments.keys {
            attachments[participant]?.closing = true
            wake(participant)
        }
    }

    static func frame(for refusal: RoomRefusal) -> RoomServerFrame {
        switch refusal {
        case .roomGone(let reason): return .roomGone(reason: reason.rawValue)
        case .notFound: return .error(code: refusal.code, message: "no call room has this id")
        case .full(let capacity): return .error(code: refusal.code, message: "the room is full (\(capacity) people)")
        case .tooManyRooms(let limit): return .error(code: refusal.code, message: "the relay has \(limit) rooms open")
        case .badToken: return .error(code: refusal.code, message: "this reconnect token holds no place in the room")
        case .notInRoom: return .error(code: refusal.code, message: "not a participant of this room")
        case .peerUnavailable:
            return .error(code: refusal.code, message: "the other participant is not connected right now")
        case .signalTooLarge(let size, let limit):
            return .error(code: refusal.code, message: "a signal of \(size) bytes exceeds the limit of \(limit)")
        }
    }

    // MARK: Delivery

    private func deliver(_ notices: [RoomRegistry.Notice], except skipped: String?) {
        for notice in notices {
            switch notice {
            case .peer(let room, let participant, let state):
                let frame = RoomFrameCodec.encode(
                    RoomServerFrame.peer(.init(participant: participant, state: state.rawValue)))
                for (id, attachment) in attachments where attachment.room == room && id != participant && id != skipped
                {
                    enqueue(frame, for: id)
                }
            case .gone(let room, let reason):
                let frame = RoomFrameCodec.encode(RoomServerFrame.roomGone(reason: reason.rawValue))
                for (id, attachment) in attachments where attachment.room == room {
                    enqueue(frame, for: id)
                    finish(id)
                }
            }
        }
    }

    private func enqueue(_ frame: Data, for participant: String) {
        guard var attachment = attachments[participant], !attachment.closing else { return }
        guard attachment.queue.count < Self.maxQueuedFrames else {
            // Too slow a reader: its connection ends; its place waits for
            // the grace, and it rejoins with its token.
            attachments[participant] = nil
            attachment.waiter?.resume()
            deliver(
                registry.disconnected(attachment.room, participant: participant, now: clock.now), except: participant)
            return
        }
        attachment.queue.append((attachment.nextSeq, frame))
        attachment.nextSeq += 1
        attachments[participant] = attachment
        wake(participant)
    }

    /// After its queued frames, the participant's connection ends.
    private func finish(_ participant: String) {
        attachments[participant]?.closing = true
        wake(participant)
    }

    private func wake(_ participant: String) {
        attachments[participant]?.waiter?.resume()
        attachments[participant]?.waiter = nil
    }
}
