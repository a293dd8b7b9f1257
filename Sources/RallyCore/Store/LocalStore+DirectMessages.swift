import Foundation
import GRDB

extension LocalStore {
    /// Direct messages only: those that travelled through an inbox. Group
    /// messages live in the same table but belong to their group's view.
    public func directMessages(afterOrder: Int64 = 0) throws(LocalStoreError) -> [StoredMessage] {
        try read { db in
            try Row.fetchAll(
                db, sql: "SELECT * FROM message WHERE local_order > ? AND topic LIKE 'inbox/%' ORDER BY local_order",
                arguments: [afterOrder]
            ).map(StoredMessage.init(row:))
        }
    }
}
