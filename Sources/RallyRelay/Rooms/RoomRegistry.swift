public import Foundation
import RallyCrypto

/// Why a room is gone: what every client is told so it stops retrying.
public enum RoomGoneReason: String, Sendable, Equatable, Codable {
    /// A participant ended it.
    case ended
    /// Nobody was in it for the idle limit.
    case expired
    /// The other participant of a two-person room left (or stayed away past
    /// the grace period).
    case peerLeft = "peer_left"
}

/// Where a participant stands.
public enum ParticipantState: String, Sendable, Equatable, Codable {
    case joined
    /// Its connection dropped: its place is kept until `RoomLimits.grace`
    /// passes, and its reconnect token takes it back.
    case suspended
    case gone
}

/// A refusal of the room rules, with the code the endpoint sends.
public enum RoomRefusal: Error, Sendable, Equatable {
    case roomGone(RoomGoneReason)
    case notFound
    case full(capacity: Int)
    case tooManyRooms(limit: Int)
    case badToken
    case notInRoom
    case peerUnavailable
    case signalTooLarge(size: Int, limit: Int)

    public var code: String {
        switch self {
        case .roomGone: "room_gone"
        case .notFound: "room_not_found"
        case .full: "room_full"
        case .tooManyRooms: "too_many_rooms"
        case .badToken: "bad_reconnect_token"
        case .notInRoom: "not_in_room"
        case .peerUnavailable: "peer_unavailable"
        case .signalTooLarge: "signal_too_large"
        }
    }
}

/// The limits of call rooms; each is a typed refusal or a timer.
public struct RoomLimits: Sendable, Equatable {
    public var maxRooms = 10_000
    /// Two: a one-to-one call, which ends when the other peer leaves.
    public var capacity = 2
    public var maxSignalBytes = 64 * 1024
    /// How long a dropped participant's place is kept: long enough that a
    /// call survives minutes of outage (the seed's "long outage
    /// auto-resume"), since in a two-person room giving the place up ends
    /// the call.
    public var grace: TimeInterval = 300
    /// How long a room with nobody joined lives.
    public var idleExpiry: TimeInterval = 600
    /// How long a gone room still answers `room_gone` with its reason.
    public var tombstoneTTL: TimeInterval = 3600
    /// Rooms one IP address may create: a sustained rate and a burst.
    public var createRatePerSecondPerIP: Double = 1
    public var createBurstPerIP: Double = 30

    public init() {}
}

/// One participant as the registry keeps it.
public struct RoomParticipant: Sendable, Equatable {
    public let id: String
    /// What takes a dropped participant's place back; only its hash would
    /// need keeping if the registry were persisted (it is not: rooms live
    /// in memory, like the calls they carry).
    let token: String
    public var state: ParticipantState
    /// When a suspended participant's place is given up.
    var suspendedUntil: Date?
}

/// A call room: who is in it and when anything last happened there.
public struct Room: Sendable, Equatable {
    public let id: String
    /// What lets the room's creator end it without holding a place in it
    /// (`rally call end ROOM`).
    public let endToken: String
    public let createdAt: Date
    public var participants: [RoomParticipant] = []
    /// When the room last had nobody joined (nil while someone is).
    var emptySince: Date?

    public var present: [RoomParticipant] { participants.filter { $0.state != .gone } }
}

/// The call rooms' rules, pure: every operation takes the time and returns
/// what happened, or a refusal, and what the other participants must be
/// told. The relay's endpoint is a thin shell around it (docs/adr/0018).
public struct RoomRegistry: Sendable {
    /// A notice for the participants of a room.
    public enum Notice: Sendable, Equatable {
        case peer(room: String, participant: String, state: ParticipantState)
        case gone(room: String, reason: RoomGoneReason)
    }

    public let limits: RoomLimits
    public private(set) var rooms: [String: Room] = [:]
    /// Gone rooms, with their reason and when they went.
    private(set) var tombstones: [String: (reason: RoomGoneReason, at: Date)] = [:]
    private var makeID: @Sendable () -> String

    public init(limits: RoomLimits = RoomLimits(), makeID: @escaping @Sendable () -> String = RoomRegistry.randomID) {
        self.limits = limits
        self.makeID = makeID
    }

    /// 128 random bits, hex.
    public static func randomID() -> String {
        var generator = SystemRandomNumberGenerator()
        return Hex.encode((0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    public mutating func create(now: Date) -> Result<Room, RoomRefusal> {
        guard rooms.count < limits.maxRooms else { return .failure(.tooManyRooms(limit: limits.maxRooms)) }
        let room = Room(id: makeID(), endToken: makeID() + makeID(), createdAt: now, emptySince: now)
        rooms[room.id] = room
        return .success(room)
    }

    /// Joins a room, or with `token` takes a suspended (or still joined,
    /// from a connection that has not noticed it dropped) place back.
    public mutating func join(
        _ roomID: String, token: String?, now: Date
    ) -> Result<(participant: RoomParticipant, notices: [Notice]), RoomRefusal> {
        guard var room = rooms[roomID] else { return .failure(refusalForMissing(roomID)) }
        if let token {
            guard let index = room.participants.firstIndex(where: { $0.token == token && $0.state != .gone }) else {
                return .failure(.badToken)
            }
            room.participants[index].state = .joined
            room.participants[index].suspendedUntil = nil
            room.emptySince = nil
            rooms[roomID] = room
            let participant = room.participants[index]
            return .success((participant, [.peer(room: roomID, participant: participant.id, state: .joined)]))
        }
        guard room.present.count < limits.capacity else { return .failure(.full(capacity: limits.capacity)) }
        let participant = RoomParticipant(id: makeID(), token: makeID() + makeID(), state: .joined)
        room.participants.append(participant)
        room.emptySince = nil
        rooms[roomID] = room
        return .success((participant, [.peer(room: roomID, participant: participant.id, state: .joined)]))
    }

    /// A participant's connection dropped: its place waits for the grace.
    public mutating func disconnected(_ roomID: String, participant: String, now: Date) -> [Notice] {
        guard var room = rooms[roomID],
            let index = room.participants.firstIndex(where: { $0.id == participant && $0.state == .joined })
        else { return [] }
        room.participants[index].state = .suspended
        room.participants[index].suspendedUntil = now.addingTimeInterval(limits.grace)
        if !room.participants.contains(where: { $0.state == .joined }) { room.emptySince = now }
        rooms[roomID] = room
        return [.peer(room: roomID, participant: participant, state: .suspended)]
    }

    /// A participant leaves for good. In a two-person room the other is
    /// told the room is gone.
    public mutating func leave(_ roomID: String, participant: String, now: Date) -> Result<[Notice], RoomRefusal> {
        guard var room = rooms[roomID] else { return .failure(refusalForMissing(roomID)) }
        guard let index = room.participants.firstIndex(where: { $0.id == participant && $0.state != .gone }) else {
            return .failure(.notInRoom)
        }
        room.participants[index].state = .gone
        room.participants[index].suspendedUntil = nil
        let hadPeer = !room.present.isEmpty
        rooms[roomID] = room
        if limits.capacity == 2, hadPeer { return .success(bury(roomID, .peerLeft, now: now)) }
        if !room.participants.contains(where: { $0.state == .joined }) { rooms[roomID]?.emptySince = now }
        return .success([.peer(room: roomID, participant: participant, state: .gone)])
    }

    /// Ends the room for everyone.
    public mutating func end(_ roomID: String, participant: String, now: Date) -> Result<[Notice], RoomRefusal> {
        guard let room = rooms[roomID] else { return .failure(refusalForMissing(roomID)) }
        guard room.present.contains(where: { $0.id == participant }) else { return .failure(.notInRoom) }
        return .success(bury(roomID, .ended, now: now))
    }

    /// Ends the room for everyone, by its creator's end token.
    public mutating func end(_ roomID: String, endToken: String, now: Date) -> Result<[Notice], RoomRefusal> {
        guard let room = rooms[roomID] else { return .failure(refusalForMissing(roomID)) }
        guard room.endToken == endToken else { return .failure(.badToken) }
        return .success(bury(roomID, .ended, now: now))
    }

    /// Checks a signal from one participant to another: both in the room,
    /// the recipient joined (a suspended one misses it; the ladder resends).
    public func signal(
        _ roomID: String, from sender: String, to recipient: String, size: Int
    ) -> Result<Void, RoomRefusal> {
        guard size <= limits.maxSignalBytes else {
            return .failure(.signalTooLarge(size: size, limit: limits.maxSignalBytes))
        }
        guard let room = rooms[roomID] else { return .failure(refusalForMissing(roomID)) }
        guard room.participants.contains(where: { $0.id == sender && $0.state == .joined }) else {
            return .failure(.notInRoom)
        }
        guard room.participants.contains(where: { $0.id == recipient && $0.state == .joined }) else {
            return .failure(.peerUnavailable)
        }
        return .success(())
    }

    /// Lets time pass: suspended places past the grace are given up (in a
    /// two-person room that ends it), rooms empty past the idle limit
    /// expire, old tombstones are forgotten.
    public mutating func tick(now: Date) -> [Notice] {
        var notices: [Notice] = []
        for roomID in rooms.keys.sorted() {
            guard var room = rooms[roomID] else { continue }
            var lapsed: [String] = []
            for index in room.participants.indices {
                if let until = room.participants[index].suspendedUntil, until <= now {
                    room.participants[index].state = .gone
                    room.participants[index].suspendedUntil = nil
                    lapsed.append(room.participants[index].id)
                }
            }
            rooms[roomID] = room
            if !lapsed.isEmpty, limits.capacity == 2 {
                notices += bury(roomID, .peerLeft, now: now)
                continue
            }
            notices += lapsed.map { .peer(room: roomID, participant: $0, state: .gone) }
            if let since = room.emptySince, now.timeIntervalSince(since) >= limits.idleExpiry,
                !room.participants.contains(where: { $0.state == .suspended })
            {
                notices += bury(roomID, .expired, now: now)
            }
        }
        tombstones = tombstones.filter { now.timeIntervalSince($0.value.at) < limits.tombstoneTTL }
        return notices
    }

    /// Why a room id names no live room.
    public func refusalForMissing(_ roomID: String) -> RoomRefusal {
        tombstones[roomID].map { .roomGone($0.reason) } ?? .notFound
    }

    private mutating func bury(_ roomID: String, _ reason: RoomGoneReason, now: Date) -> [Notice] {
        rooms[roomID] = nil
        tombstones[roomID] = (reason, now)
        return [.gone(room: roomID, reason: reason)]
    }
}
