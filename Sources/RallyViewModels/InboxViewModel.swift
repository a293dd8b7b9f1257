import Foundation
public import Observation
public import RallyCore
public import RallyCrypto

/// The direct-message inbox as a SwiftUI view binds to it: the stored
/// messages, whether a sync is running, and the last error in words a user
/// can act on.
@MainActor
@Observable
public final class InboxViewModel {
    public private(set) var messages: [StoredMessage] = []
    public private(set) var isSyncing = false
    public private(set) var errorMessage: String?
    /// Envelopes that were dropped because they failed verification.
    public private(set) var rejectedCount = 0

    private let client: RallyClient

    public init(client: RallyClient) {
        self.client = client
    }

    /// Loads what is stored, then fetches what arrived since the last sync.
    public func refresh() async {
        isSyncing = true
        defer { isSyncing = false }
        do {
            let report = try await client.syncInbox()
            rejectedCount += report.rejected.count
            messages = try await client.directMessageHistory()
            errorMessage = nil
        } catch {
            errorMessage = String(describing: error)
        }
    }

    public func send(_ text: String, to recipient: InboxID) async {
        do {
            let message = try await client.sendText(text, to: recipient)
            messages.append(message)
            errorMessage = nil
        } catch {
            errorMessage = error.description
        }
    }
}
