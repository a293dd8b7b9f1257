import Foundation
import Testing

@testable import RallyRelay

/// The call room rules (docs/adr/0018) on an injected time: joining,
/// suspension and the reconnect token, leaving and ending, expiry, the
/// tombstone's `room_gone`, and every limit.
@Suite("Call room registry")
struct RoomRegistryTests {
    static let start = Date(timeIntervalSince1970: 1_800_000_000)

    /// Ids `id-1`, `id-2`, … so tests can name them.
    static func registry(_ configure: (inout RoomLimits) -> Void = { _ in }) -> RoomRegistry {
        final class Counter: @unchecked Sendable {
            // Only touched from the test's one task, in order.
            var next = 0
        }
        let counter = Counter()
        var limits = RoomLimits()
        configure(&limits)
        return RoomRegistry(limits: limits) {
            counter.next += 1
            return "id-\(counter.next)"
        }
    }

    static func at(_ seconds: TimeInterval) -> Date { start.addingTimeInterval(seconds) }

    @Test("two join a room; a third is refused as full; each join is announced")
    func joinAndCapacity() throws {
        var rooms = Self.registry()
        let room = try rooms.create(now: Self.start).get()
        let alice = try rooms.join(room.id, token: nil, now: Self.at(1)).get()
        let bob = try rooms.join(room.id, token: nil, now: Self.at(2)).get()
        #expect(alice.participant.state == .joined && bob.participant.id != alice.participant.id)
        #expect(bob.notices == [.peer(room: room.id, participant: bob.participant.id, state: .joined)])
        #expect(throws: RoomRefusal.full(capacity: 2)) { try rooms.join(room.id, token: nil, now: Self.at(3)).get() }
        #expect(throws: RoomRefusal.notFound) { try rooms.join("nope", token: nil, now: Self.at(3)).get() }
    }

    @Test("a dropped participant is suspended; its token takes its place back within the grace; a wrong token does not")
    func suspensionAndToken() throws {
        var rooms = Self.registry { $0.grace = 30 }
        let room = try rooms.create(now: Self.start).get()
        let alice = try rooms.join(room.id, token: nil, now: Self.start).get().participant
        _ = try rooms.join(room.id, token: nil, now: Self.start).get()
        #expect(
            rooms.disconnected(room.id, participant: alice.id, now: Self.at(5)) == [
                .peer(room: room.id, participant: alice.id, state: .suspended)
            ])
        #expect(rooms.tick(now: Self.at(34.9)).isEmpty)
        #expect(throws: RoomRefusal.badToken) { try rooms.join(room.id, token: "guess", now: Self.at(35)).get() }
        let back = try rooms.join(room.id, token: alice.token, now: Self.at(34.9)).get()
        #expect(back.participant.id == alice.id && back.participant.state == .joined)
        // Back in time: the grace no longer runs.
        #expect(rooms.tick(now: Self.at(100)).isEmpty)
    }

    @Test("past the grace the place is given up: in a two-person room that is room_gone (peer_left), for good")
    func graceLapses() throws {
        var rooms = Self.registry { $0.grace = 30 }
        let room = try rooms.create(now: Self.start).get()
        let alice = try rooms.join(room.id, token: nil, now: Self.start).get().participant
        _ = try rooms.join(room.id, token: nil, now: Self.start).get()
        _ = rooms.disconnected(room.id, participant: alice.id, now: Self.at(10))
        #expect(rooms.tick(now: Self.at(40)) == [.gone(room: room.id, reason: .peerLeft)])
        #expect(throws: RoomRefusal.roomGone(.peerLeft)) {
            try rooms.join(room.id, token: alice.token, now: Self.at(41)).get()
        }
    }

    @Test("leave in a two-person room ends it for the other (peer_left); end ends it for all (ended)")
    func leaveAndEnd() throws {
        var rooms = Self.registry()
        let one = try rooms.create(now: Self.start).get()
        let alice = try rooms.join(one.id, token: nil, now: Self.start).get().participant
        _ = try rooms.join(one.id, token: nil, now: Self.start).get()
        #expect(
            try rooms.leave(one.id, participant: alice.id, now: Self.at(1)).get() == [
                .gone(room: one.id, reason: .peerLeft)
            ])
        #expect(throws: RoomRefusal.roomGone(.peerLeft)) { try rooms.join(one.id, token: nil, now: Self.at(2)).get() }

        let two = try rooms.create(now: Self.start).get()
        let carol = try rooms.join(two.id, token: nil, now: Self.start).get().participant
        #expect(throws: RoomRefusal.notInRoom) { try rooms.end(two.id, participant: "stranger", now: Self.at(1)).get() }
        #expect(
            try rooms.end(two.id, participant: carol.id, now: Self.at(1)).get() == [.gone(room: two.id, reason: .ended)]
        )
        #expect(rooms.refusalForMissing(two.id) == .roomGone(.ended))
        // The tombstone is kept for its TTL, then the id is simply unknown.
        _ = rooms.tick(now: Self.at(1 + 3599))
        #expect(rooms.refusalForMissing(two.id) == .roomGone(.ended))
        _ = rooms.tick(now: Self.at(1 + 3600))
        #expect(rooms.refusalForMissing(two.id) == .notFound)
    }

    @Test("the creator's end token ends a room without a place in it; another token does not")
    func endToken() throws {
        var rooms = Self.registry()
        let room = try rooms.create(now: Self.start).get()
        _ = try rooms.join(room.id, token: nil, now: Self.start).get()
        #expect(throws: RoomRefusal.badToken) { try rooms.end(room.id, endToken: "guess", now: Self.at(1)).get() }
        #expect(
            try rooms.end(room.id, endToken: room.endToken, now: Self.at(1)).get() == [
                .gone(room: room.id, reason: .ended)
            ])
        #expect(throws: RoomRefusal.roomGone(.ended)) {
            try rooms.end(room.id, endToken: room.endToken, now: Self.at(2)).get()
        }
    }

    @Test("the default grace outlasts a two-minute outage (the seed's long outage auto-resume)")
    func defaultGrace() throws {
        var rooms = Self.registry()
        let room = try rooms.create(now: Self.start).get()
        let alice = try rooms.join(room.id, token: nil, now: Self.start).get().participant
        _ = try rooms.join(room.id, token: nil, now: Self.start).get()
        _ = rooms.disconnected(room.id, participant: alice.id, now: Self.at(1))
        #expect(rooms.tick(now: Self.at(1 + 150)).isEmpty)
        #expect(try rooms.join(room.id, token: alice.token, now: Self.at(151)).get().participant.state == .joined)
    }

    @Test("a room nobody is in expires after the idle limit (a suspended participant keeps it)")
    func idleExpiry() throws {
        var rooms = Self.registry()
        let room = try rooms.create(now: Self.start).get()
        #expect(rooms.tick(now: Self.at(599.9)).isEmpty)
        #expect(rooms.tick(now: Self.at(600)) == [.gone(room: room.id, reason: .expired)])
        #expect(throws: RoomRefusal.roomGone(.expired)) { try rooms.join(room.id, token: nil, now: Self.at(601)).get() }
    }

    @Test("a signal needs both ends joined in the room and stays within its size")
    func signals() throws {
        var rooms = Self.registry()
        let room = try rooms.create(now: Self.start).get()
        let alice = try rooms.join(room.id, token: nil, now: Self.start).get().participant
        let bob = try rooms.join(room.id, token: nil, now: Self.start).get().participant
        #expect(throws: Never.self) { try rooms.signal(room.id, from: alice.id, to: bob.id, size: 900).get() }
        #expect(throws: RoomRefusal.signalTooLarge(size: 64 * 1024 + 1, limit: 64 * 1024)) {
            try rooms.signal(room.id, from: alice.id, to: bob.id, size: 64 * 1024 + 1).get()
        }
        #expect(throws: RoomRefusal.notInRoom) { try rooms.signal(room.id, from: "mallory", to: bob.id, size: 1).get() }
        _ = rooms.disconnected(room.id, participant: bob.id, now: Self.at(1))
        #expect(throws: RoomRefusal.peerUnavailable) {
            try rooms.signal(room.id, from: alice.id, to: bob.id, size: 1).get()
        }
    }

    @Test("rooms in all are capped; a bigger room stays when one participant leaves")
    func limits() throws {
        var rooms = Self.registry {
            $0.maxRooms = 2; $0.capacity = 3
        }
        let first = try rooms.create(now: Self.start).get()
        _ = try rooms.create(now: Self.start).get()
        #expect(throws: RoomRefusal.tooManyRooms(limit: 2)) { try rooms.create(now: Self.start).get() }
        let a = try rooms.join(first.id, token: nil, now: Self.start).get().participant
        _ = try rooms.join(first.id, token: nil, now: Self.start).get()
        #expect(
            try rooms.leave(first.id, participant: a.id, now: Self.at(1)).get() == [
                .peer(room: first.id, participant: a.id, state: .gone)
            ])
        #expect(rooms.rooms[first.id]?.present.count == 1)
        #expect(throws: RoomRefusal.notInRoom) { try rooms.leave(first.id, participant: a.id, now: Self.at(2)).get() }
    }
}
