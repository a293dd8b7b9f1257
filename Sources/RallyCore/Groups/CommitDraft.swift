import Crypto
import Foundation
import RallyCrypto
import RallyWire

/// How a commit is drafted on a state and sealed into a log entry: pure,
/// the one definition the committer and the tests share.
enum CommitDraft {
    /// A commit building on `state`: its group, epoch and transcript.
    static func on(
        _ state: GroupState, by author: PublicIdentity, at date: Date, id: Data = MessageSealing.newMessageID()
    ) -> WireGroupCommit {
        var commit = WireGroupCommit()
        commit.groupID = state.groupID
        commit.epoch = state.epoch
        commit.parentTranscript = state.transcript
        commit.commitID = id
        commit.author = author.wireBundle
        commit.createdAtMs = ClientClock.millis(date)
        return commit
    }

    /// A signed commit sealed under the commit key of the epoch it builds
    /// on, carrying that epoch's transcript and epoch link, so members and
    /// the relay's ordering agree on where it belongs.
    static func sealed(
        _ signed: WireSignedGroupCommit, epoch: UInt64, epochKey: SymmetricKey, groupID: String, transcript: Data,
        epochLink: Data
    ) throws -> WireSealedGroupCommit {
        var sealed = try CommitSealing.seal(
            signed, commitKey: CommitSealing.commitKey(epochKey: epochKey), groupID: groupID, epoch: epoch)
        sealed.transcript = transcript
        sealed.epochLink = epochLink
        return sealed
    }
}
