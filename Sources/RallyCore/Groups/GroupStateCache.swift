import Foundation
import RallyWire
import Synchronization

/// Decoded group states, each kept with the snapshot bytes it came from.
///
/// A group's stored snapshot grows with its members and its history, and
/// most operations read the group again (a join's admission reads it many
/// times), so decoding it each time was a large share of a join's CPU in a
/// group of a few hundred members. The bytes are still read from the
/// database every time: another process on the same home may have written
/// a newer state, and a state is reused only when its bytes are identical
/// to what the database holds now. Comparing the bytes is a `memcmp`,
/// far cheaper than decoding them.
final class GroupStateCache: Sendable {
    /// Groups whose decoded state is kept; past it the cache starts over
    /// (a home with more groups than this decodes some twice). Kept small
    /// for app extensions' memory limits: a decoded state grows with its
    /// group's members and history.
    static let capacity = 16

    private struct Entry {
        let snapshot: Data
        let state: GroupState
    }

    private let entries = Mutex<[String: Entry]>([:])

    /// The state `snapshot` (a stored `WireGroupSnapshot`) decodes to.
    func state(groupID: String, snapshot: Data) throws -> GroupState {
        if let entry = entries.withLock({ $0[groupID] }), entry.snapshot == snapshot { return entry.state }
        let state = try GroupState(snapshot: FrameCodec.decodeGroupSnapshot(snapshot, limit: .max))
        remember(state, groupID: groupID, decodedFrom: snapshot)
        return state
    }

    /// Keeps a state the caller decoded from exactly `snapshot` (a
    /// welcome's, stored as received), so the first read of the group after
    /// storing it does not decode it again.
    func remember(_ state: GroupState, groupID: String, decodedFrom snapshot: Data) {
        entries.withLock { entries in
            if entries.count >= Self.capacity, entries[groupID] == nil { entries.removeAll(keepingCapacity: true) }
            entries[groupID] = Entry(snapshot: snapshot, state: state)
        }
    }

    /// How many states are kept (for tests).
    var count: Int { entries.withLock { $0.count } }
}
