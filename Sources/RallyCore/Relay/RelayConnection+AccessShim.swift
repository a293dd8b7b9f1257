import Foundation
import RallyCrypto
import RallyWire

// TEMPORARY: replaced by the capability-aware API of the relay branch at merge.
extension RelayConnection {
    public func publish(
        topic: TopicName, payload: Data, idempotencyKey: Data, shouldPush: Bool = false, access: TopicAccess?,
        control: Bool = false, expectedControlSeq: UInt64 = 0, rotateAccessKey: Data? = nil
    ) async throws(RelayClientError) -> WirePublishAck {
        try await publish(topic: topic, payload: payload, idempotencyKey: idempotencyKey, shouldPush: shouldPush)
    }

    public func subscribe(
        topic: TopicName, after cursor: UInt64, access: TopicAccess?
    ) -> AsyncThrowingStream<SubscriptionEvent, any Error> {
        subscribe(topic: topic, after: cursor)
    }
}
