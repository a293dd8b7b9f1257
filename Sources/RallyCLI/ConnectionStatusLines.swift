import Foundation
import RallyCore

/// What a terminal prints for the relay connection's status while a command
/// follows live: a line when what a user would see changes
/// ("Reconnecting…", "Reconnecting… Taking longer than usual", and
/// "Connected" once it recovers from a reconnecting the user saw). A blip
/// shorter than the machine's 800 ms prints no line, as an app shows
/// nothing. Pure: ``ConnectionStatusLines/start(_:output:)`` is the shell.
struct ConnectionStatusLinePrinter: Sendable {
    private var shown: String?

    init() {}

    /// The line a terminal shows for a presentation, nil for none.
    static func line(for presentation: ConnectionStatusPresentation) -> String? {
        guard presentation.indicatorVisible, let text = presentation.text else { return nil }
        guard let subText = presentation.subText else { return text }
        // "Taking longer than usual…" reads as a continuation of the line.
        return "\(text) \(subText.hasSuffix("…") ? String(subText.dropLast()) : subText)"
    }

    /// The line to print for this update, if any.
    mutating func line(for presentation: ConnectionStatusPresentation) -> String? {
        if let line = Self.line(for: presentation) {
            defer { shown = line }
            return line == shown ? nil : line
        }
        guard shown != nil else { return nil }
        shown = nil
        // "Connected" only closes a "Reconnecting…" the user saw; a Leave
        // or a gone session prints nothing more.
        return presentation.status == .connected ? "Connected" : nil
    }
}

/// Prints the connection status while a command follows live: lines for
/// people, one `{"event":"connection",…}` object per change of status or
/// indicator for programs (`--json`).
struct ConnectionStatusLines {
    struct EventJSON: Encodable {
        let event = "connection"
        let status: String
        let indicator: Bool
        let text: String?
        let subText: String?
        let showsLeave: Bool
        let haptic: Bool
    }

    /// Starts printing; cancel the task to stop.
    static func start(_ client: RallyClient, output: Output) -> Task<Void, Never> {
        Task {
            var printer = ConnectionStatusLinePrinter()
            var first = true
            for await update in await client.connectionStatusUpdates() {
                defer { first = false }
                let presentation = update.presentation
                if output.json {
                    // Programs get every change, a short blip too (its
                    // status changes, its indicator does not), but not the
                    // idle state before the first subscription.
                    if first, presentation.status == .idle { continue }
                    output.emit(
                        EventJSON(
                            status: presentation.status.rawValue, indicator: presentation.indicatorVisible,
                            text: presentation.text, subText: presentation.subText,
                            showsLeave: presentation.showsLeave, haptic: update.haptic)
                    ) { "" }
                } else if let line = printer.line(for: presentation) {
                    Output.write(line)
                }
            }
        }
    }
}
