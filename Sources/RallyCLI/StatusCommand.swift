import ArgumentParser
import Foundation
import RallyCore

/// `rally status`: whether the relay answers now, and what waits in this
/// home's outbox for it.
struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show the relay connection and the outgoing messages waiting for it.",
        discussion:
            "Connects once (on --transport), reports whether the relay answered, then lists the messages queued while it was out of reach and any it refused. With --send-queued, sends what waits first."
    )

    @OptionGroup var options: ClientOptions
    @Flag(help: "Send queued messages now when the relay answers.") var sendQueued = false

    struct StatusJSON: Encodable {
        let relay: String
        let inboxId: String
        let reachable: Bool
        let transport: String
        let error: String?
        let sent: Int?
        let queued: Int
        let failed: [FailureJSON]
    }

    struct FailureJSON: Encodable {
        let messageId: String
        let reason: String
    }

    func run() async throws {
        let client = try options.openClient()
        let probe = await client.probeRelay()
        var sent: Int?
        if sendQueued, probe.reachable { sent = try await client.sendQueued() }
        await client.disconnect()
        let counts = try client.outboxCounts()
        let failures = try client.failedOutgoing()
        let relay = try options.relayURL().absoluteString
        let report = StatusJSON(
            relay: relay, inboxId: client.inboxID.rawValue, reachable: probe.reachable,
            transport: probe.transport.rawValue, error: probe.error?.description, sent: sent, queued: counts.queued,
            failed: failures.map { FailureJSON(messageId: $0.messageID, reason: $0.reason) })
        options.output.emit(report) {
            var lines: [String] = []
            if probe.reachable {
                lines.append("relay: \(relay) — connected over \(Self.name(probe.transport))")
            } else {
                lines.append(
                    "relay: \(relay) — not reachable over \(Self.name(probe.transport)): \((probe.error?.description ?? "no answer").terminalSafe)"
                )
            }
            lines.append("identity: \(client.inboxID)")
            if let sent { lines.append("sent \(sent) queued message(s)") }
            switch counts.queued {
            case 0: lines.append("outgoing: nothing queued")
            case let count:
                lines.append(
                    "outgoing: \(count) message(s) queued; they are sent when the relay answers (`rally status --send-queued`, any command that sends, or `rally watch`)"
                )
            }
            for failure in failures {
                lines.append("refused by the relay: \(failure.messageID): \(failure.reason.terminalSafe)")
            }
            return lines.joined(separator: "\n")
        }
    }

    static func name(_ transport: ActiveTransport) -> String {
        switch transport {
        case .webSocket: "WebSocket"
        case .http: "HTTP"
        }
    }
}
