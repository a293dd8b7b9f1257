public import Foundation
import GRDB
import RallyWire

/// The calls this home started: each room's link (its secret in the secret
/// store) and the token that ends it, so `rally call end ROOM` works from
/// any process on the home, later. Joining needs no home: the link is the
/// invitation.
public struct CallBook: Sendable {
    /// A room this home created.
    public struct Room: Sendable, Equatable {
        public var link: CallLink
        public var endToken: String
        public var createdAt: Date
    }

    let store: LocalStore
    let clock: ClientClock

    init(store: LocalStore, clock: ClientClock = .system) {
        self.store = store
        self.clock = clock
    }

    /// Opens the book of the home at `home` (no identity needed).
    public static func open(
        home: URL, secrets: (any SecretStore)? = nil, clock: ClientClock = .system
    ) throws(LocalStoreError) -> CallBook {
        CallBook(store: try LocalStore(home: home, secrets: secrets), clock: clock)
    }

    /// Creates a room on the relay and keeps its link and end token.
    public func create(relayURL: URL) async throws(CallError) -> Room {
        let created = try await CallRooms.create(relayURL: relayURL)
        let room = Room(link: created.link, endToken: created.endToken, createdAt: clock.now())
        do {
            try store.saveCallRoom(room)
        } catch {
            throw .refused(code: "store", message: "the room was made but this home cannot keep it: \(error)")
        }
        return room
    }

    /// Ends a room this home created, for everyone in it, and forgets it.
    /// A room the relay already ended (or let expire) is forgotten too.
    public func end(room: String) async throws(CallError) {
        let found: Room?
        do {
            found = try store.callRoom(room)
        } catch {
            throw .refused(code: "store", message: "this home's store cannot be read: \(error)")
        }
        guard let kept = found else { throw .notCreatedHere(room) }
        do {
            try await CallRooms.end(relayURL: kept.link.relayURL, room: room, endToken: kept.endToken)
        } catch .refused(code: "room_gone", _) {
            // Already over: nothing left to end.
        } catch .roomNotFound {
            // Expired and forgotten by the relay.
        }
        try? store.removeCallRoom(room)
    }

    /// The room this home created with this id, if any.
    public func room(_ id: String) -> Room? { try? store.callRoom(id) }

    /// Every room this home created and has not ended, newest first.
    public func rooms() throws(LocalStoreError) -> [Room] { try store.callRooms() }
}

/// A room this home created (its secret and end token are in the secret
/// store, under `call/<room>/…`).
struct CallRoomRecord: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "call_room"

    var room: String
    var relayURL: String
    var createdAtMs: Int64

    enum CodingKeys: String, CodingKey {
        case room
        case relayURL = "relay_url"
        case createdAtMs = "created_at_ms"
    }

    static func createTable(_ db: Database) throws {
        try db.create(table: databaseTableName) { table in
            table.primaryKey("room", .text)
            table.column("relay_url", .text).notNull()
            table.column("created_at_ms", .integer).notNull()
        }
    }
}

extension SecretName {
    /// A call room's link secret (rooms this home created).
    static func callSecret(room: String) -> SecretName { SecretName(rawValue: "call/\(room)/secret") }
    /// The token that ends a call room this home created.
    static func callEndToken(room: String) -> SecretName { SecretName(rawValue: "call/\(room)/end-token") }
}

extension LocalStore {
    func saveCallRoom(_ room: CallBook.Room) throws(LocalStoreError) {
        // Secrets first: a row is only ever visible with its secrets.
        try setSecret(room.link.secret, .callSecret(room: room.link.room))
        try setSecret(Data(room.endToken.utf8), .callEndToken(room: room.link.room))
        try write { db in
            try CallRoomRecord(
                room: room.link.room, relayURL: room.link.relayURL.absoluteString,
                createdAtMs: ClientClock.millis(room.createdAt)
            ).save(db)
        }
    }

    func callRoom(_ id: String) throws(LocalStoreError) -> CallBook.Room? {
        guard RoomWireLimits.isRoomID(id) else { return nil }
        guard let record = try read({ db in try CallRoomRecord.fetchOne(db, key: id) }) else { return nil }
        return try room(record)
    }

    func callRooms() throws(LocalStoreError) -> [CallBook.Room] {
        let records = try read { db in try CallRoomRecord.order(Column("created_at_ms").desc).fetchAll(db) }
        var rooms: [CallBook.Room] = []
        for record in records {
            if let room = try room(record) { rooms.append(room) }
        }
        return rooms
    }

    func removeCallRoom(_ id: String) throws(LocalStoreError) {
        _ = try write { db in try CallRoomRecord.deleteOne(db, key: id) }
        try removeSecret(.callSecret(room: id))
        try removeSecret(.callEndToken(room: id))
    }

    private func room(_ record: CallRoomRecord) throws(LocalStoreError) -> CallBook.Room? {
        guard let relayURL = URL(string: record.relayURL),
            let key = try secret(.callSecret(room: record.room)),
            let token = try secret(.callEndToken(room: record.room))
        else { return nil }
        return CallBook.Room(
            link: CallLink(relayURL: relayURL, room: record.room, secret: key),
            endToken: String(decoding: token, as: UTF8.self),
            createdAt: Date(timeIntervalSince1970: Double(record.createdAtMs) / 1000))
    }
}
