import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import NIOCore
import RallyWire
import ServiceLifecycle

/// The call rooms' HTTP and WebSocket shell around ``RoomHub``, and the
/// browser call client's pages (docs/adr/0018):
/// - `POST /v1/rooms`: a new room, `{"room": id, "path": "/call/<id>",
///   "end_token": …}`; `DELETE /v1/rooms/<id>` with the end token in
///   `Rally-Room-Token` ends it;
/// - `GET /v1/rooms/<id>`: whether it is live (`room_gone` with its reason,
///   410, once it is not);
/// - `GET /v1/rooms/<id>/ws`: one participant's JSON frames;
/// - `POST /v1/rooms/<id>/http` and `GET …/http?after=N`: the same frames
///   over plain requests and long polls, the call ladder's transport
///   fallback; requests after `join` carry the reconnect token in
///   `Rally-Room-Token`;
/// - `GET /call`, `/call/<id>` and `/call/assets/<file>`: the browser client.
enum RoomEndpoints {
    static let jsonContentType = "application/json"
    static let tokenHeader = HTTPField.Name("Rally-Room-Token")!
    static let lastSeqHeader = HTTPField.Name("Rally-Last-Seq")!
    /// How long a long poll waits for a frame before answering empty.
    static let pollWait: Duration = .seconds(5)

    static func addRoutes(to router: Router<RelayRequestContext>, services: RelayServices) {
        let rooms = services.rooms
        router.post("/v1/rooms") { _, context in
            if case .limited(let retryAfter) = services.roomRates.take(context.remoteIP, now: services.clock.monotonic)
            {
                var response = frameResponse(
                    .tooManyRequests, .error(code: "rate_limited", message: "too many rooms created from this address"))
                response.headers[.retryAfter] = String(max(1, (retryAfter + 999) / 1000))
                return response
            }
            switch await rooms.create() {
            case .failure(let refusal): return refusalResponse(refusal)
            case .success(let room):
                let body = #"{"end_token":"\#(room.endToken)","path":"/call/\#(room.id)","room":"\#(room.id)"}"#
                return Response(
                    status: .created, headers: [.contentType: jsonContentType, .cacheControl: "no-store"],
                    body: .init(byteBuffer: ByteBuffer(string: body)))
            }
        }
        router.get("/v1/rooms/{id}") { _, context in
            guard let id = roomID(context) else { return refusalResponse(.notFound) }
            switch await rooms.status(id) {
            case .refused(let refusal): return refusalResponse(refusal)
            case .live(let participants):
                return Response(
                    status: .ok, headers: [.contentType: jsonContentType, .cacheControl: "no-store"],
                    body: .init(byteBuffer: ByteBuffer(string: #"{"participants":\#(participants),"room":"\#(id)"}"#)))
            }
        }
        router.delete("/v1/rooms/{id}") { request, context in
            guard let id = roomID(context) else { return refusalResponse(.notFound) }
            guard let token = request.headers[tokenHeader], RoomWireLimits.isToken(token) else {
                return refusalResponse(.badToken)
            }
            switch await rooms.end(id, endToken: token) {
            case .failure(let refusal): return refusalResponse(refusal)
            case .success: return Response(status: .noContent)
            }
        }
        router.post("/v1/rooms/{id}/http") { request, context in
            guard let id = roomID(context) else { return refusalResponse(.notFound) }
            let body: ByteBuffer
            do {
                body = try await request.body.collect(upTo: RoomWireLimits.maxFrameBytes)
            } catch {
                return frameResponse(
                    .contentTooLarge,
                    .error(code: "malformed_frame", message: "a frame is at most \(RoomWireLimits.maxFrameBytes) bytes")
                )
            }
            let frame: RoomClientFrame
            do throws(RoomFrameError) {
                frame = try RoomFrameCodec.decodeClient(Data(body.readableBytesView))
            } catch {
                return frameResponse(.badRequest, .error(code: "malformed_frame", message: error.description))
            }
            if case .join(let token) = frame {
                switch await rooms.join(id, token: token, transport: .poll) {
                case .failure(let refusal): return refusalResponse(refusal)
                case .success(let joined): return frameResponse(.ok, joined.frame)
                }
            }
            guard let place = await place(request, room: id, rooms: rooms) else { return refusalResponse(.badToken) }
            let reply = await rooms.receive(frame, from: place.id, connection: place.connection)
            return reply.map { frameResponse(.ok, $0) } ?? Response(status: .noContent)
        }
        router.get("/v1/rooms/{id}/http") { request, context in
            guard let id = roomID(context) else { return refusalResponse(.notFound) }
            guard let place = await place(request, room: id, rooms: rooms) else {
                // The place is gone: say why (the room may be gone).
                if case .refused(let refusal) = await rooms.status(id) { return refusalResponse(refusal) }
                return refusalResponse(.badToken)
            }
            let after = request.uri.queryParameters.get("after").flatMap { UInt64($0) } ?? 0
            guard
                let frames = await rooms.frames(
                    for: place.id, connection: place.connection, after: after, wait: pollWait)
            else { return Response(status: .gone, headers: [.contentType: jsonContentType]) }
            var body = ByteBuffer()
            for (_, frame) in frames {
                body.writeBytes(frame)
                body.writeString("\n")
            }
            return Response(
                status: .ok,
                headers: [
                    .contentType: "application/x-ndjson", .cacheControl: "no-store",
                    lastSeqHeader: String(frames.last?.seq ?? after),
                ],
                body: .init(byteBuffer: body))
        }
        CallPage.addRoutes(to: router)
    }

    private static func roomID(_ context: RelayRequestContext) -> String? {
        guard let id = context.parameters.get("id"), RoomWireLimits.isRoomID(id) else { return nil }
        return id
    }

    private static func place(
        _ request: Request, room: String, rooms: RoomHub
    ) async -> (id: String, connection: UInt64)? {
        guard let token = request.headers[tokenHeader], RoomWireLimits.isToken(token) else { return nil }
        return await rooms.participant(room: room, token: token)
    }

    private static func frameResponse(_ status: HTTPResponse.Status, _ frame: RoomServerFrame) -> Response {
        Response(
            status: status, headers: [.contentType: jsonContentType, .cacheControl: "no-store"],
            body: .init(byteBuffer: ByteBuffer(bytes: RoomFrameCodec.encode(frame))))
    }

    static func refusalResponse(_ refusal: RoomRefusal) -> Response {
        let status: HTTPResponse.Status =
            switch refusal {
            case .roomGone: .gone
            case .notFound: .notFound
            case .full, .badToken, .notInRoom, .peerUnavailable: .conflict
            case .tooManyRooms: .serviceUnavailable
            case .signalTooLarge: .contentTooLarge
            }
        return frameResponse(status, RoomHub.frame(for: refusal))
    }

    // MARK: WebSocket

    private static func send(_ frame: RoomServerFrame, _ outbound: WebSocketOutboundWriter) async throws {
        try await outbound.write(.text(String(decoding: RoomFrameCodec.encode(frame), as: UTF8.self)))
    }

    /// One participant's socket (`/v1/rooms/<id>/ws`, upgraded by
    /// ``RelayHTTPChannel``).
    static func serve(
        room: String, inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, remoteIP: String,
        services: RelayServices
    ) async throws {
        if case .refused(let reason) = services.connections.admit(ip: remoteIP) {
            try? await send(.error(code: "too_many_connections", message: reason), outbound)
            return
        }
        defer { services.connections.release(ip: remoteIP) }
        guard RoomWireLimits.isRoomID(room) else {
            try? await send(RoomHub.frame(for: .notFound), outbound)
            return
        }
        var messages = inbound.messages(maxSize: RoomWireLimits.maxFrameBytes).makeAsyncIterator()
        // The first frame must be `join`, within the relay's auth timeout:
        // past it the socket is closed, which ends the read below.
        let joinTimer = Task {
            try await Task.sleep(for: services.limits.authTimeout)
            try? await send(.error(code: "join_timeout", message: "the first frame must be join"), outbound)
            try? await outbound.close(.policyViolation, reason: "join timeout")
        }
        let first: RoomClientFrame
        do {
            guard let message = try await messages.next() else { return }
            joinTimer.cancel()
            first = try RoomFrameCodec.decodeClient(payload(message))
        } catch let error as RoomFrameError {
            try? await send(.error(code: "malformed_frame", message: error.description), outbound)
            return
        } catch {
            joinTimer.cancel()
            return
        }
        guard case .join(let token) = first else {
            try? await send(.error(code: "not_joined", message: "the first frame must be join"), outbound)
            return
        }
        let joined: RoomHub.Joined
        switch await services.rooms.join(room, token: token, transport: .socket) {
        case .failure(let refusal):
            try? await send(RoomHub.frame(for: refusal), outbound)
            return
        case .success(let value): joined = value
        }
        try await send(joined.frame, outbound)

        await withGracefulShutdownHandler {
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    // The pump: the mailbox to the socket until this
                    // connection is over, then the socket closes (which
                    // ends the read loop below).
                    var seen: UInt64 = 0
                    pumping: while let frames = await services.rooms.frames(
                        for: joined.participant, connection: joined.connection, after: seen, wait: .seconds(30))
                    {
                        for (seq, frame) in frames {
                            guard (try? await outbound.write(.text(String(decoding: frame, as: UTF8.self)))) != nil
                            else { break pumping }
                            seen = seq
                        }
                    }
                    try? await outbound.close(.normalClosure, reason: nil)
                }
                while let message = try? await messages.next() {
                    let reply: RoomServerFrame?
                    do {
                        let frame = try RoomFrameCodec.decodeClient(payload(message))
                        reply = await services.rooms.receive(
                            frame, from: joined.participant, connection: joined.connection)
                    } catch {
                        reply = .error(code: "malformed_frame", message: "\(error)")
                    }
                    if let reply { try? await send(reply, outbound) }
                }
                // The socket closed: the place waits for the grace period
                // (a no-op when the connection was replaced or left).
                await services.rooms.detach(joined.participant, connection: joined.connection)
                group.cancelAll()
            }
        } onGracefulShutdown: {
            Task { await services.rooms.shutdown() }
        }
    }

    private static func payload(_ message: WebSocketMessage) -> Data {
        switch message {
        case .text(let text): Data(text.utf8)
        case .binary(let buffer): Data(buffer.readableBytesView)
        }
    }
}
