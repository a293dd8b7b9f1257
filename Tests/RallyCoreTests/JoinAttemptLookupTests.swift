import Foundation
import RallyCrypto
import Testing

@testable import RallyCore

/// A join's wait looks its attempt up on every message, and every answer
/// looks up the attempts of its invite: by key and by tag, not by reading
/// and decoding every attempt the home ever made.
@Suite("Join attempt lookups")
struct JoinAttemptLookupTests {
    let inviter = GroupTest.identity("Inviter").inboxID

    func attempt(_ requestID: String, tag: String, startedAtMs: Int64) -> JoinAttempt {
        let started = Date(timeIntervalSince1970: Double(startedAtMs) / 1000)
        return JoinAttempt(
            requestID: requestID, invite: .init(tag: tag, inviterInbox: inviter, name: "Climbers"), slug: "slug",
            phase: .joining, groupID: nil, existing: false, errorType: nil, reason: nil, startedAt: started,
            updatedAt: started)
    }

    /// Forty attempts with random ids, plus ids chosen to sit at the edges
    /// of a prefix range (after a 9, after an f).
    func storeWithAttempts() throws -> (TemporaryHome, LocalStore, [JoinAttempt]) {
        let temp = TemporaryHome()
        let store = try temp.openStore()
        var attempts = (0..<40).map { index in
            attempt(
                MessageSealing.newMessageID().hexString, tag: index.isMultiple(of: 2) ? "aa" : "bb",
                startedAtMs: Int64(index))
        }
        attempts.append(attempt("9f" + String(repeating: "0", count: 62), tag: "cc", startedAtMs: 100))
        attempts.append(attempt("a0" + String(repeating: "0", count: 62), tag: "cc", startedAtMs: 101))
        attempts.append(attempt("ff" + String(repeating: "1", count: 62), tag: "cc", startedAtMs: 102))
        for attempt in attempts { try store.saveJoinAttempt(attempt) }
        return (temp, store, attempts)
    }

    @Test func aWholeRequestIDFindsExactlyItsAttempt() throws {
        let (temp, store, attempts) = try storeWithAttempts()
        defer { temp.remove() }
        for attempt in attempts {
            #expect(try store.joinAttempts(requestIDPrefix: attempt.requestID, limit: 2) == [attempt])
        }
    }

    /// Each prefix finds what filtering every attempt would, up to the
    /// limit, in request id order.
    @Test func aPrefixFindsWhatAFullScanWould() throws {
        let (temp, store, attempts) = try storeWithAttempts()
        defer { temp.remove() }
        let prefixes = ["9", "9f", "a", "a0", "f", "ff", "ff1", "0", "7c", "e"]
        for prefix in prefixes {
            let expected = attempts.filter { $0.requestID.hasPrefix(prefix) }.sorted { $0.requestID < $1.requestID }
            #expect(try store.joinAttempts(requestIDPrefix: prefix, limit: 100) == expected, "prefix \(prefix)")
            #expect(try store.joinAttempts(requestIDPrefix: prefix, limit: 2) == Array(expected.prefix(2)))
        }
    }

    /// What is not lowercase hex (an empty prefix among them) is matched
    /// as before: by filtering, so an empty one matches everything.
    @Test func aPrefixThatIsNotHexMatchesByFiltering() throws {
        let (temp, store, _) = try storeWithAttempts()
        defer { temp.remove() }
        #expect(try store.joinAttempts(requestIDPrefix: "", limit: 2).count == 2)
        #expect(try store.joinAttempts(requestIDPrefix: "xyz", limit: 2).isEmpty)
        #expect(try store.joinAttempts(requestIDPrefix: "9F", limit: 2).isEmpty)
        #expect(try store.joinAttempts(requestIDPrefix: "%", limit: 2).isEmpty)
    }

    @Test func theUpperBoundOfAHexPrefixIsItsLastDigitPlusOne() {
        #expect(LocalStore.hexPrefixUpperBound("ab") == "ac")
        #expect(LocalStore.hexPrefixUpperBound("9") == ":")
        #expect(LocalStore.hexPrefixUpperBound("0f") == "0g")
        #expect(LocalStore.hexPrefixUpperBound("") == nil)
        #expect(LocalStore.hexPrefixUpperBound("AB") == nil)
        #expect(LocalStore.hexPrefixUpperBound("a-") == nil)
    }

    @Test func anInvitesAttemptsAreFoundByItsTagNewestFirst() throws {
        let (temp, store, attempts) = try storeWithAttempts()
        defer { temp.remove() }
        for tag in ["aa", "bb", "cc"] {
            let expected = attempts.filter { $0.invite.tag == tag }.sorted { $0.startedAt > $1.startedAt }
            #expect(try store.joinAttempts(tag: tag) == expected)
        }
        #expect(try store.joinAttempts(tag: "dd").isEmpty)
    }
}
