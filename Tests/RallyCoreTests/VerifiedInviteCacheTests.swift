import Crypto
import Foundation
import RallyCrypto
import RallyWire
import Testing

@testable import RallyCore

@Suite("Verified invite cache")
struct VerifiedInviteCacheTests {
    @Test func anInviteVerifiedOnceIsKnownAndAnythingElseIsVerifiedAgain() throws {
        let alice = try InviteFixtures.alice()
        let signed = Invite.sign(InviteFixtures.payload(issuer: alice), by: alice)
        _ = try Invite.verify(signed, now: InviteFixtures.now)
        #expect(VerifiedInviteCache.shared.contains(VerifiedInviteCache.key(signed)))
        // The same bytes again: verified from the cache, same result.
        #expect(try Invite.verify(signed, now: InviteFixtures.now).signed == signed)

        // A cached signature over other bytes, or other bytes under it, is
        // checked for real and refused.
        var flippedSignature = signed
        flippedSignature.signature[10] ^= 0x01
        #expect(throws: InviteError.invalidSignature) { try Invite.verify(flippedSignature, now: InviteFixtures.now) }
        var changedPayload = signed
        var payload = InviteFixtures.payload(issuer: alice)
        payload.name = "Another name"
        changedPayload.payload = FrameCodec.encode(payload)
        #expect(throws: InviteError.invalidSignature) { try Invite.verify(changedPayload, now: InviteFixtures.now) }
        // Expiry is judged on every call, cached or not.
        let expired = InviteFixtures.now.addingTimeInterval(10 * 365 * 86_400)
        #expect(throws: InviteError.self) { try Invite.verify(signed, now: expired) }
    }

    @Test func noOtherSplitOfTheSameBytesHasTheSameKey() {
        var whole = WireSignedInvite()
        whole.signature = Data(repeating: 0xAB, count: 64)
        whole.payload = Data("payload".utf8)
        var shifted = WireSignedInvite()
        shifted.signature = Data(repeating: 0xAB, count: 63)
        shifted.payload = Data([0xAB]) + Data("payload".utf8)
        #expect(VerifiedInviteCache.key(whole) != VerifiedInviteCache.key(shifted))
    }

    @Test func theCacheIsBoundedAndForgetsItsOldestFirst() {
        let cache = VerifiedInviteCache(capacity: 3)
        let keys = (0..<5).map { SHA256.hash(data: Data([UInt8($0)])) }
        for key in keys { cache.insert(key) }
        cache.insert(keys[4])
        #expect(cache.count == 3)
        #expect(keys.map(cache.contains) == [false, false, true, true, true])
    }
}
