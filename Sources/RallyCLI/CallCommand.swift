import ArgumentParser
import Dispatch
import Foundation
import RallyCore
import RallyWire

/// `rally call`: call rooms on the relay, from a terminal.
struct CallCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "call",
        abstract: "Start, join and end calls: rooms on the relay, signaling sealed under the link's key.",
        subcommands: [CallCreateCommand.self, CallJoinCommand.self, CallEndCommand.self, CallListCommand.self])
}

/// Options the call commands share: a home (only to remember the rooms it
/// created), a relay and the output format.
struct CallOptions: ParsableArguments {
    @Option(
        help: "Directory of the local store that remembers the calls started here (env RALLY_HOME; default ~/.rally).")
    var home: String?

    @Option(help: "Relay base URL (env RALLY_RELAY; default http://127.0.0.1:8080).")
    var relay: String?

    @Flag(help: "Print machine-readable JSON.")
    var json = false

    var client: ClientOptions {
        var options = ClientOptions()
        options.home = home
        options.relay = relay
        options.json = json
        return options
    }

    var output: Output { Output(json: json) }

    func book() throws -> CallBook { try CallBook.open(home: client.homeURL) }
}

struct CallRoomJSON: Encodable {
    let room: String
    let link: String
    let endToken: String?
    let relay: String
    let createdAt: Date?
}

struct CallCreateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create",
        abstract: "Create a call room and print its link.",
        discussion:
            "Share the whole link: the key after # seals the call's signaling and never reaches the relay. This home keeps the room's end token for `rally call end`."
    )

    @OptionGroup var options: CallOptions

    func run() async throws {
        let room = try await options.book().create(relayURL: try options.client.relayURL())
        options.output.emit(
            CallRoomJSON(
                room: room.link.room, link: room.link.description, endToken: room.endToken,
                relay: room.link.relayURL.absoluteString, createdAt: room.createdAt)
        ) {
            """
            call room \(room.link.room)
            link: \(room.link)
            join it: rally call join '\(room.link)'
            end it for everyone: rally call end \(room.link.room)
            """
        }
    }
}

struct CallEndCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "end",
        abstract: "End a call this home created, for everyone in it.")

    @OptionGroup var options: CallOptions
    @Argument(help: "The room id (or the call's link).") var room: String

    func run() async throws {
        let id = (try? CallLink(parsing: room))?.room ?? room
        guard RoomWireLimits.isRoomID(id) else {
            throw ValidationError("\"\(room.terminalSafe)\" is not a call room id (32 lowercase hex digits) or link")
        }
        try await options.book().end(room: id)
        struct EndedJSON: Encodable {
            let room: String
            let ended: Bool
        }
        options.output.emit(EndedJSON(room: id, ended: true)) { "ended call \(id): everyone in it goes home" }
    }
}

struct CallListCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List the calls this home created and has not ended.")

    @OptionGroup var options: CallOptions

    func run() async throws {
        let rooms = try options.book().rooms()
        options.output.emit(
            rooms.map {
                CallRoomJSON(
                    room: $0.link.room, link: $0.link.description, endToken: nil,
                    relay: $0.link.relayURL.absoluteString, createdAt: $0.createdAt)
            }
        ) {
            rooms.isEmpty
                ? "no calls started here" : rooms.map { "\($0.link.room)  \($0.link)" }.joined(separator: "\n")
        }
    }
}

/// `rally call join`: takes part in a call's signaling with a scripted media
/// engine (no camera here), printing every phase and connection status
/// change, until the call ends, `--seconds` runs out, or Ctrl-C leaves it.
struct CallJoinCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "join",
        abstract: "Join a call as a signaling participant and print its phases and status.",
        discussion:
            "Takes a call link, or the id of a room this home created. Ctrl-C (or --seconds) leaves the call. With --json, prints one JSON object per change."
    )

    @OptionGroup var options: CallOptions
    @Argument(help: "The call's link, or the id of a room created from this home.") var roomOrLink: String
    @Option(help: "Leave after this many seconds (default: stay until the call ends or Ctrl-C).")
    var seconds: Int?

    struct ChangeJSON: Encodable {
        let event = "call"
        let phase: String
        let status: String
        let indicator: Bool
        let text: String?
        let subText: String?
        let showsLeave: Bool
        let participant: String?
        let transport: String
        let end: String?
        let message: String?
    }

    func link() throws -> CallLink {
        do {
            return try CallLink(parsing: roomOrLink)
        } catch {
            if RoomWireLimits.isRoomID(roomOrLink) {
                if let room = try options.book().room(roomOrLink) { return room.link }
                throw ValidationError(
                    "this home did not create call \(roomOrLink), so it does not have its key: join with the whole link (it ends in #<key>)"
                )
            }
            throw ValidationError(error.description)
        }
    }

    func run() async throws {
        let session = CallSession(link: try link(), media: ScriptedMediaEngine(name: "cli"))
        let output = options.output
        let updates = await session.updates()
        let leave = LeaveTrigger(session: session, seconds: seconds)
        await session.start()
        var printer = ConnectionStatusLinePrinter()
        var lastPhase: CallPhase?
        for await snapshot in updates {
            if output.json {
                output.emit(
                    ChangeJSON(
                        phase: snapshot.phase.rawValue, status: snapshot.status.status.rawValue,
                        indicator: snapshot.status.indicatorVisible, text: snapshot.status.text,
                        subText: snapshot.status.subText, showsLeave: snapshot.status.showsLeave,
                        participant: snapshot.participant, transport: snapshot.transport.rawValue,
                        end: snapshot.end?.rawValue, message: snapshot.outcome)
                ) { "" }
            } else {
                if snapshot.phase != lastPhase, let line = Self.line(for: snapshot) { Output.write(line) }
                if snapshot.phase == .inCall, let line = printer.line(for: snapshot.status) { Output.write(line) }
            }
            lastPhase = snapshot.phase
            if snapshot.isOver { break }
        }
        leave.cancel()
        if let error = await session.current.error { throw error }
    }

    static func line(for snapshot: CallSnapshot) -> String? {
        switch snapshot.phase {
        case .idle: snapshot.end.map { "home: \($0.message)" }
        case .creatingRoom: "creating the room…"
        case .joining: "joining…"
        case .waiting: "waiting for the other person to join…"
        case .inCall: "in the call (connected)"
        case .ending: nil
        case .error: snapshot.error.map { "could not join: \($0.description)" }
        }
    }
}

/// Leaves the call on Ctrl-C, SIGTERM or when `--seconds` runs out.
final class LeaveTrigger {
    private let sources: [any DispatchSourceSignal]
    private let timer: Task<Void, Never>?

    init(session: CallSession, seconds: Int?) {
        sources = [SIGINT, SIGTERM].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { Task { await session.leave() } }
            source.resume()
            return source
        }
        timer = seconds.map { seconds in
            Task {
                try? await Task.sleep(for: .seconds(seconds))
                guard !Task.isCancelled else { return }
                await session.leave()
            }
        }
    }

    func cancel() {
        timer?.cancel()
        for source in sources { source.cancel() }
    }
}
