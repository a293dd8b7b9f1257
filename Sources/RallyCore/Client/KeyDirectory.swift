import Foundation
import RallyCrypto
import RallyWire

/// Key bundles: publishing this identity's, and looking up others' —
/// verified, since the relay is not trusted — with a local cache.
struct KeyDirectory: Sendable {
    let context: ClientContext

    func publishOwnBundle() async throws(RallyClientError) {
        let bundle = context.identity.signedKeyBundle()
        try await context.withRetries("key bundle") { link throws(RelayClientError) in
            try await link.putKeyBundle(bundle)
        }
    }

    /// The verified public identity of an inbox: from the local cache, or
    /// fetched from the relay and checked (signature, and that its keys
    /// really hash to the requested inbox id).
    func lookUp(_ inbox: InboxID) async throws(RallyClientError) -> PublicIdentity {
        if inbox == context.identity.inboxID { return context.identity.publicIdentity }
        if let known = try context.stored({ () throws(LocalStoreError) in try context.store.contact(inbox) }) {
            return known
        }
        let signed = try await context.withRetries("key lookup") { link throws(RelayClientError) in
            try await link.keyBundle(for: inbox)
        }
        guard let signed else { throw .unknownRecipient(inbox) }
        let verified: PublicIdentity
        do {
            verified = try PublicIdentity(verifying: signed)
        } catch {
            throw .recipientKeysInvalid(inbox, reason: error.description)
        }
        guard verified.inboxID == inbox else {
            throw .recipientKeysInvalid(inbox, reason: "the keys belong to \(verified.inboxID)")
        }
        try context.stored { () throws(LocalStoreError) in try context.store.saveContact(verified) }
        return verified
    }
}
