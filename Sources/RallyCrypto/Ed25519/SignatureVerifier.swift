public import Crypto
public import Foundation
import Synchronization

/// Ed25519 verification that learns the keys it sees often. A key's first
/// few signatures are checked by swift-crypto; from its `tableAfter`-th on,
/// by an `Ed25519KeyTable` built once for it, which takes about half the
/// time per signature in a release build but costs a few verifications to build
/// (docs/adr/0027). Both accept exactly the same signatures.
///
/// Bounded: at most `keyCapacity` keys are counted and `tableCapacity`
/// tables (30 KiB each) kept; the least recently used go first.
public final class SignatureVerifier: Sendable {
    /// The one the library's own checks share: invites, commits, welcome
    /// proofs, messages, key bundles, vault entries and topic proofs (not
    /// relay authentication, whose keys are each seen once per connection).
    public static let shared = SignatureVerifier()

    public static let defaultTableAfter = 4
    public static let defaultKeyCapacity = 1024
    public static let defaultTableCapacity = 32

    private struct Entry {
        var sightings = 0
        var lastUse: UInt64 = 0
        var table: Ed25519KeyTable?
    }

    private struct State {
        var entries: [Data: Entry] = [:]
        var tables = 0
        var clock: UInt64 = 0
    }

    private let tableAfter: Int
    private let keyCapacity: Int
    private let tableCapacity: Int
    private let state = Mutex(State())

    public init(
        tableAfter: Int = defaultTableAfter, keyCapacity: Int = defaultKeyCapacity,
        tableCapacity: Int = defaultTableCapacity
    ) {
        precondition(tableAfter >= 1 && keyCapacity >= 1 && tableCapacity >= 0)
        self.tableAfter = tableAfter
        self.keyCapacity = keyCapacity
        self.tableCapacity = min(tableCapacity, keyCapacity)
    }

    public func isValidSignature(
        _ signature: some DataProtocol, for message: some DataProtocol, by key: Curve25519.Signing.PublicKey
    ) -> Bool {
        isValidSignature(signature, for: message, byKeyBytes: key.rawRepresentation) { key }
    }

    /// The same check for a key held as its 32 bytes (a `PublicIdentity`):
    /// the CryptoKit key is made only when swift-crypto verifies.
    public func isValidSignature(
        _ signature: some DataProtocol, for message: some DataProtocol, byKeyBytes raw: Data,
        key: () -> Curve25519.Signing.PublicKey
    ) -> Bool {
        switch sighting(of: raw) {
        case .table(let table):
            return table.isValidSignature(signature, for: message)
        case .build:
            guard let table = Ed25519KeyTable(publicKey: raw) else { return false }
            keep(table)
            return table.isValidSignature(signature, for: message)
        case .plain:
            return key().isValidSignature(signature, for: message)
        }
    }

    /// How many keys are counted and how many have tables (for tests).
    var counts: (keys: Int, tables: Int) { state.withLock { ($0.entries.count, $0.tables) } }

    func hasTable(for key: Curve25519.Signing.PublicKey) -> Bool {
        state.withLock { $0.entries[key.rawRepresentation]?.table != nil }
    }

    private enum Sighting {
        case table(Ed25519KeyTable)
        case build
        case plain
    }

    private func sighting(of key: Data) -> Sighting {
        state.withLock { state in
            state.clock += 1
            if var entry = state.entries[key] {
                entry.sightings += 1
                entry.lastUse = state.clock
                state.entries[key] = entry
                if let table = entry.table { return .table(table) }
                return entry.sightings >= tableAfter && tableCapacity > 0 ? .build : .plain
            }
            if state.entries.count >= keyCapacity,
                let oldest = state.entries.min(by: { $0.value.lastUse < $1.value.lastUse })
            {
                if oldest.value.table != nil { state.tables -= 1 }
                state.entries[oldest.key] = nil
            }
            state.entries[key] = Entry(sightings: 1, lastUse: state.clock)
            return tableAfter <= 1 && tableCapacity > 0 ? .build : .plain
        }
    }

    /// Keeps a table built outside the lock (another caller may have kept
    /// one for the key meanwhile; either serves).
    private func keep(_ table: Ed25519KeyTable) {
        state.withLock { state in
            guard var entry = state.entries[table.publicKey], entry.table == nil else { return }
            if state.tables >= tableCapacity,
                let oldest = state.entries.filter({ $0.value.table != nil })
                    .min(by: { $0.value.lastUse < $1.value.lastUse })
            {
                state.entries[oldest.key]?.table = nil
                state.tables -= 1
            }
            entry.table = table
            state.entries[table.publicKey] = entry
            state.tables += 1
        }
    }
}

extension Curve25519.Signing.PublicKey {
    /// `isValidSignature(_:for:)` through `SignatureVerifier.shared`: the
    /// same answer, faster for a key that signs often.
    public func verifies(_ signature: some DataProtocol, for message: some DataProtocol) -> Bool {
        SignatureVerifier.shared.isValidSignature(signature, for: message, by: self)
    }
}
