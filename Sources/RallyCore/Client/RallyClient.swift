import Crypto
public import Foundation
public import Logging
public import RallyCrypto
public import RallyWire

/// The client SDK's entry point: one identity, its home (local database and
/// secrets) and its relay. A thin facade: each capability — direct
/// messages, groups, the inviter's desk, joins, watch — is a service of
/// its own over one shared context, and these methods hand over to them.
///
/// ```swift
/// let client = try await RallyClient.create(home: home, relayURL: relay, displayName: "Alice")
/// let attempt = try await client.startJoin(inviteLink)
/// let final = try await client.waitForJoin(requestID: attempt.requestID) { print($0.phase) }
/// ```
public actor RallyClient {
    /// Kept for source compatibility: the inbox's events.
    public typealias InboxEvent = RallyCore.InboxEvent

    /// How often an idempotent request is retried on a new link after a
    /// transient failure.
    public static let publishAttempts = ClientContext.requestAttempts
    /// How often a group commit is rebuilt after losing a race to another.
    public static let commitAttempts = GroupCommitter.attempts
    /// How often `watch` looks for groups and invite keys that another
    /// process on the same home added.
    public static let watchRescanInterval = WatchService.rescanInterval

    public nonisolated let identity: Identity
    public nonisolated let codecs: CodecRegistry
    nonisolated let context: ClientContext
    nonisolated let directMessages: DirectMessageService
    nonisolated let inbox: InboxService
    nonisolated let groupLog: GroupLog
    nonisolated let committer: GroupCommitter
    nonisolated let groupService: GroupService
    nonisolated let inviterDesk: InviterDesk
    nonisolated let joins: JoinService
    nonisolated let watcher: WatchService
    nonisolated let vaults: VaultService
    nonisolated let nominees: NomineeService
    /// Member admission: the approval queue and its support chat.
    public nonisolated let groupAdmission: GroupAdmissionService
    /// The group's one link.
    public nonisolated let groupLinks: GroupLinks
    /// Invitations a person accepts or declines.
    public nonisolated let groupInvitations: GroupInvitations

    /// The home's database. Internal: apps and the CLI go through the
    /// services.
    nonisolated var store: LocalStore { context.store }
    /// The relay this client talks to.
    public nonisolated var relayURL: URL { context.relayURL }
    public nonisolated var inboxID: InboxID { identity.inboxID }
    public nonisolated var inboxTopic: TopicName { context.inboxTopic }

    init(context: ClientContext) {
        self.context = context
        self.identity = context.identity
        self.codecs = context.codecs
        let messages = DirectMessageService(context: context)
        let log = GroupLog(context: context, ownOutcomes: OwnCommitOutcomes())
        let committer = GroupCommitter(context: context, log: log)
        let welcomes = GroupWelcomes(context: context, log: log, messages: messages)
        let groups = GroupService(
            context: context, log: log, committer: committer, welcomes: welcomes, keys: messages.keys)
        let desk = InviterDesk(
            context: context, log: log, committer: committer, welcomes: welcomes, identities: InviteIdentities())
        let joins = JoinService(context: context, messages: messages)
        let vaults = VaultService(context: context)
        let nominees = NomineeService(context: context, vaults: vaults, messages: messages)
        let inbox = InboxService(
            context: context, welcomes: welcomes, joins: joins, groups: groups, leaves: CancelledJoinLeaves(),
            nominees: nominees)
        self.directMessages = messages
        self.inbox = inbox
        self.groupLog = log
        self.committer = committer
        self.groupService = groups
        self.inviterDesk = desk
        self.joins = joins
        self.watcher = WatchService(context: context, inbox: inbox, log: log, desk: desk)
        self.vaults = vaults
        self.nominees = nominees
        self.groupAdmission = GroupAdmissionService(
            context: context, log: log, committer: committer, welcomes: welcomes, messages: messages)
        self.groupLinks = GroupLinks(desk: desk)
        self.groupInvitations = GroupInvitations(desk: desk, joins: joins, messages: messages)
        context.outboxRoutes.route { item, groupID throws(RallyClientError) in
            try await groups.sendQueued(item, groupID: groupID)
        }
    }

    // MARK: Identity

    /// Creates a new identity in `home`, stores it and publishes its key
    /// bundle on the relay.
    /// - Parameters:
    ///   - home: The directory that holds this identity's database (created
    ///     owner-only if missing). One identity per home.
    ///   - relayURL: The relay's base URL, e.g. `http://127.0.0.1:8080`.
    ///   - displayName: The name others see in this identity's key bundle.
    ///   - codecs: The content types this client understands.
    ///   - logger: Where the SDK logs.
    ///   - secrets: Where secret keys go (say, the Keychain; see
    ///     ``SecretStore``); nil keeps them in the home's owner-only database.
    ///   - transport: How to reach the relay; nil is a ``WebSocketTransport``
    ///     to `relayURL`.
    ///   - clock: The wall clock and pauses (injected in tests).
    ///   - connection: How the relay connection recovers (transport
    ///     choice, backoff, heartbeat, status timers).
    /// - Throws: ``RallyClientError/store(_:)`` when the home cannot be
    ///   opened or already holds an identity; ``RallyClientError/relay(_:)``
    ///   when the key bundle cannot be published.
    public static func create(
        home: URL, relayURL: URL, displayName: String, codecs: CodecRegistry = .standard,
        logger: Logger = Logger(label: "rally.client"), secrets: (any SecretStore)? = nil,
        transport: (any RelayTransport)? = nil, clock: ClientClock = .system,
        connection: ConnectionPolicy = .standard
    ) async throws(RallyClientError) -> RallyClient {
        let store = try openStore(home: home, secrets: secrets)
        let existing = try ClientContext.stored { () throws(LocalStoreError) in try store.loadIdentity() }
        if existing != nil { throw .store(.identityExists(home.path)) }
        let identity = Identity(displayName: displayName)
        let client = RallyClient(
            context: makeContext(
                identity: identity, store: store, relayURL: relayURL, transport: transport, clock: clock,
                connection: connection, codecs: codecs, logger: logger))
        try await client.publishKeyBundle()
        try client.context.stored { () throws(LocalStoreError) in try store.saveIdentity(identity) }
        return client
    }

    /// Opens the identity stored in `home`.
    /// - Parameters:
    ///   - home: The directory ``create(home:relayURL:displayName:codecs:logger:secrets:transport:clock:)``
    ///     made.
    ///   - secrets: The secret store the identity was created with (nil:
    ///     the home's owner-only database).
    ///   - transport: How to reach the relay; nil is a ``WebSocketTransport``.
    ///   - clock: The wall clock and pauses.
    ///   - connection: How the relay connection recovers.
    /// - Throws: ``RallyClientError/noIdentity(home:)`` when the home holds
    ///   none; ``RallyClientError/store(_:)`` when it cannot be read.
    public static func open(
        home: URL, relayURL: URL, codecs: CodecRegistry = .standard, logger: Logger = Logger(label: "rally.client"),
        secrets: (any SecretStore)? = nil, transport: (any RelayTransport)? = nil, clock: ClientClock = .system,
        connection: ConnectionPolicy = .standard
    ) throws(RallyClientError) -> RallyClient {
        let store = try openStore(home: home, secrets: secrets)
        let identity = try ClientContext.stored { () throws(LocalStoreError) in try store.loadIdentity() }
        guard let identity else { throw .noIdentity(home: home.path) }
        return RallyClient(
            context: makeContext(
                identity: identity, store: store, relayURL: relayURL, transport: transport, clock: clock,
                connection: connection, codecs: codecs, logger: logger))
    }

    private static func makeContext(
        identity: Identity, store: LocalStore, relayURL: URL, transport: (any RelayTransport)?, clock: ClientClock,
        connection: ConnectionPolicy, codecs: CodecRegistry, logger: Logger
    ) -> ClientContext {
        let transports = RelayTransports.choose(relayURL: relayURL, given: transport, policy: connection)
        let monitor = ConnectionMonitor(clock: connection.statusClock ?? clock, startsOn: transports.startsOn)
        return ClientContext(
            identity: identity, store: store, transports: transports, monitor: monitor, clock: clock,
            policy: connection, codecs: codecs, logger: logger)
    }

    private static func openStore(home: URL, secrets: (any SecretStore)?) throws(RallyClientError) -> LocalStore {
        do {
            return try LocalStore(home: home, secrets: secrets)
        } catch {
            throw .store(error)
        }
    }

    // MARK: Connection

    /// The shared link to the relay, opened if needed.
    func connected() async throws(RallyClientError) -> any RelayLink {
        do {
            return try await context.links.connected()
        } catch {
            throw .relay(error)
        }
    }

    /// Closes the shared link to the relay (the next request opens a new
    /// one).
    public func disconnect() async {
        await context.links.disconnect()
    }

    /// The relay connection's status as the connection-status machine
    /// sees it: what to show, and whether to play the haptic. The first
    /// update is the current status; one follows every change. Live
    /// followers (``watch(handler:)``, the `follow` methods) drive it.
    public nonisolated func connectionStatusUpdates() async -> AsyncStream<ConnectionStatusUpdate> {
        await context.monitor.updates()
    }

    /// The relay connection as a whole: status, transport in use,
    /// followers live and recovering, recovery attempts per rung.
    public nonisolated func connectionReport() async -> ConnectionReport {
        await context.monitor.report
    }

    /// The user's "Leave": the status becomes idle and live followers
    /// stop recovering and end.
    public nonisolated func leaveConnection() async {
        await context.monitor.leave()
    }

    /// Whether the relay answers now, on the transport the client would
    /// use, without changing the connection status.
    public func probeRelay() async -> RelayProbe {
        let transport = await context.monitor.transport
        do throws(RelayClientError) {
            let link = try await context.links.connected()
            try await link.ping()
            return RelayProbe(reachable: true, transport: transport, error: nil)
        } catch {
            return RelayProbe(reachable: false, transport: transport, error: error)
        }
    }

    // MARK: Outbox

    /// How many outgoing messages wait in this home for the relay, and how
    /// many it refused for good.
    public nonisolated func outboxCounts() throws(RallyClientError) -> OutboxCounts {
        try context.outbox.counts()
    }

    /// The outgoing messages the relay refused for good, with its reason.
    public nonisolated func failedOutgoing() throws(RallyClientError) -> [OutgoingFailure] {
        try context.outbox.failures()
    }

    /// Sends what waits in the outbox, oldest first. Live followers do
    /// this by themselves whenever they (re)connect.
    /// - Returns: How many were sent.
    /// - Throws: ``RallyClientError/store(_:)`` when the home cannot be
    ///   read.
    @discardableResult
    public func sendQueued() async throws(RallyClientError) -> Int {
        try await context.outbox.flush().values.filter { if case .sent = $0 { true } else { false } }.count
    }

    // MARK: Push

    /// Registers the URL the relay calls when an envelope that asks for a
    /// push reaches this inbox (a webhook of the app's push service). The
    /// call says only that something arrived. One target per identity:
    /// registering again replaces it.
    /// - Returns: The URL as the relay stored it.
    /// - Throws: ``RallyClientError/relay(_:)``: the relay refuses a URL
    ///   that is not https or points at a private address.
    public func registerPush(_ url: URL) async throws(RallyClientError) -> URL {
        try await PushService(context: context).register(url)
    }

    /// The push target the relay holds for this identity, if any.
    public func pushTarget() async throws(RallyClientError) -> URL? {
        try await PushService(context: context).target()
    }

    /// Removes this identity's push target; false when there was none.
    public func unregisterPush() async throws(RallyClientError) -> Bool {
        try await PushService(context: context).unregister()
    }

    // MARK: Keys

    /// Publishes this identity's signed key bundle on the relay.
    /// - Throws: ``RallyClientError/relay(_:)`` after the retries.
    public func publishKeyBundle() async throws(RallyClientError) {
        try await directMessages.keys.publishOwnBundle()
    }

    /// The verified public identity of an inbox: from the local cache, or
    /// fetched from the relay and checked (signature, and that its keys
    /// really hash to the inbox id).
    /// - Throws: ``RallyClientError/unknownRecipient(_:)`` when the relay
    ///   has no bundle; ``RallyClientError/recipientKeysInvalid(_:reason:)``
    ///   when the bundle fails the checks.
    public func lookUp(_ inbox: InboxID) async throws(RallyClientError) -> PublicIdentity {
        try await directMessages.keys.lookUp(inbox)
    }

    // MARK: Direct messages

    /// Sends a text message to an inbox.
    /// - Returns: The message as stored here.
    /// - Throws: ``RallyClientError`` (unknown recipient, relay failure).
    public func sendText(_ text: String, to recipient: InboxID) async throws(RallyClientError) -> StoredMessage {
        try await directMessages.send(text, codec: TextCodec(), to: recipient, messageID: nil, keepCopy: true)
    }

    /// Signs, seals and posts a message of any content type to the
    /// recipient's inbox. Retried publishes reuse the message id, so the
    /// recipient gets it once.
    /// - Parameters:
    ///   - messageID: A 16-byte id to use (nil: a random one).
    ///   - keepCopy: Whether to store the sent message here.
    /// - Throws: ``RallyClientError/content(_:)`` when the value does not
    ///   encode, ``RallyClientError/messageTooLarge(size:limit:)``, or a
    ///   relay or store failure.
    public func send<C: ContentCodec>(
        _ value: C.Value, codec: C, to recipient: InboxID, messageID: Data? = nil, keepCopy: Bool = true
    ) async throws(RallyClientError) -> StoredMessage {
        try await directMessages.send(value, codec: codec, to: recipient, messageID: messageID, keepCopy: keepCopy)
    }

    /// Direct messages stored here, sent and received, oldest first (group
    /// messages are not among them).
    /// - Throws: ``RallyClientError/store(_:)``.
    public func directMessageHistory() throws(RallyClientError) -> [StoredMessage] {
        try directMessages.directMessages()
    }

    /// Fetches everything that arrived in the inbox since the stored
    /// cursor, stores it and returns what was new.
    /// - Throws: a relay or store failure; nothing is skipped, the next
    ///   sync reads on from where this one stopped.
    public func syncInbox() async throws(RallyClientError) -> InboxSyncReport {
        try await inbox.sync()
    }

    /// Streams the inbox from the stored cursor: backlog, then live. Every
    /// event is persisted before `handler` sees it.
    /// - Parameter untilCaughtUp: Return after the backlog; otherwise run
    ///   until the task is cancelled, reconnecting after drops.
    public func followInbox(
        untilCaughtUp: Bool, handler: @Sendable (InboxEvent) async -> Void
    ) async throws(RallyClientError) {
        try await inbox.follow(untilCaughtUp: untilCaughtUp, handler: handler)
    }

    // MARK: Groups

    /// The groups this device knows, oldest first.
    public func groups() throws(RallyClientError) -> [GroupRecord] {
        try groupLog.groups()
    }

    /// Resolves a group by id, id prefix or name.
    /// - Throws: ``GroupClientError/unknownGroup(_:)`` or
    ///   ``GroupClientError/ambiguousGroup(_:matches:)`` (as `.group`).
    public func group(_ reference: String) throws(RallyClientError) -> GroupRecord {
        try groupLog.group(reference)
    }

    /// Creates a group with this identity as its owner.
    /// - Throws: `.group(.commitRejected(.invalidProfile))` for a profile
    ///   out of bounds (see ``GroupImage``), a relay or store failure.
    public func createGroup(
        name: String, description: String = "", fullName: String = "", image: GroupImage? = nil
    ) async throws(RallyClientError) -> GroupRecord {
        try await groupService.create(
            GroupProfile(name: name, description: description, fullName: fullName, image: image))
    }

    /// Changes the group's profile (owner only); nil leaves a field as it
    /// is. Every member sees the change.
    public func updateGroupProfile(
        _ reference: String, name: String? = nil, fullName: String? = nil, description: String? = nil,
        image: GroupImage? = nil
    ) async throws(RallyClientError) -> GroupRecord {
        try await groupService.updateProfile(in: reference) { profile in
            if let name { profile.name = name }
            if let fullName { profile.fullName = fullName }
            if let description { profile.description = description }
            if let image { profile.image = image }
        }
    }

    /// Adds a member (an admin's commit) and sends them their welcome.
    /// - Throws: `.group(.commitRejected)` when the rules refuse it (not an
    ///   admin, already a member, …), `.group(.full)` when the group's
    ///   welcome would no longer fit in an envelope, `.group(.gaveUp)`
    ///   after losing ``commitAttempts`` races.
    public func addMember(
        _ inbox: InboxID, role: GroupRole = .member, to reference: String
    ) async throws(RallyClientError) -> GroupRecord {
        try await groupService.addMember(inbox, role: role, to: reference)
    }

    /// Removes a member and replaces the group key; with `ban`, their
    /// later join requests are refused too.
    public func removeMember(
        _ inbox: InboxID, from reference: String, ban: Bool = false
    ) async throws(RallyClientError) -> GroupRecord {
        try await groupService.removeMembers([inbox], from: reference, ban: ban, withMessages: false)
    }

    /// Removes members in one commit and replaces the group key once; with
    /// `ban` their later join requests are refused, with `withMessages`
    /// every member's client deletes their messages in the group.
    public func removeMembers(
        _ inboxes: [InboxID], from reference: String, ban: Bool = false, withMessages: Bool = false
    ) async throws(RallyClientError) -> GroupRecord {
        try await groupService.removeMembers(inboxes, from: reference, ban: ban, withMessages: withMessages)
    }

    /// Changes a member's role (actor ≥ target, new role ≤ actor's).
    public func changeRole(
        of inbox: InboxID, to role: GroupRole, in reference: String
    ) async throws(RallyClientError) -> GroupRecord {
        try await groupService.changeRoles(of: [inbox], to: role, in: reference)
    }

    /// Gives several members one role in one commit; the role rule holds
    /// for each (actor ≥ target, new role ≤ actor's).
    public func changeRoles(
        of inboxes: [InboxID], to role: GroupRole, in reference: String
    ) async throws(RallyClientError) -> GroupRecord {
        try await groupService.changeRoles(of: inboxes, to: role, in: reference)
    }

    /// Blocks members for all (moderator and above): every member is shown
    /// "🚫 blocked by an admin" instead of their messages, until unblocked.
    public func blockMembers(
        _ inboxes: [InboxID], in reference: String, blocked: Bool = true
    ) async throws(RallyClientError) {
        try await groupService.block(inboxes, in: reference, blocked: blocked)
    }

    /// Sets the welcome message each new member sees (owner; empty: none).
    public func setWelcomeMessage(_ text: String, in reference: String) async throws(RallyClientError) {
        try await groupService.setWelcome(text, in: reference)
    }

    /// Replaces the group's epoch key.
    public func rekey(_ reference: String) async throws(RallyClientError) {
        try await groupService.rekey(reference)
    }

    /// Leaves a group; the remaining members replace the key.
    public func leaveGroup(_ reference: String) async throws(RallyClientError) {
        try await groupService.leave(reference)
    }

    /// Ends a group for good (owner only).
    public func explodeGroup(_ reference: String) async throws(RallyClientError) {
        try await groupService.explode(reference)
    }

    /// Deletes a group (owner only): every member's client drops it and the
    /// relay deletes its topic; later join requests get
    /// `conversation_not_found`.
    public func deleteGroup(_ reference: String) async throws(RallyClientError) {
        try await groupService.delete(reference)
    }

    /// Removes a group from this device only.
    public func forgetGroup(_ reference: String) throws(RallyClientError) {
        try groupService.forget(reference)
    }

    /// Sends a text message into a group (replacing the key first if a
    /// member left). When the relay is out of reach the message is queued
    /// in the home (``StoredMessage/isQueued``) and sealed and sent when it
    /// is back, like a direct message.
    /// - Returns: The message as the log stored it, or as queued.
    /// - Throws: `.group(.mayNotSend)` for observers, `.group(.diverged)`
    ///   after the relay showed this device a forked history.
    public func sendGroupText(_ text: String, to reference: String) async throws(RallyClientError) -> StoredMessage {
        try await groupService.sendText(text, to: reference)
    }

    /// Reacts to a group message; refused here (and by every member) when
    /// the group's preferences turn reactions off for this member's role.
    public func sendGroupReaction(
        _ emoji: String, to messageID: String, in reference: String
    ) async throws(RallyClientError) -> StoredMessage {
        try await groupService.sendReaction(emoji, to: messageID, in: reference)
    }

    /// Deletes a group message: your own, or (moderator and above) anyone's.
    /// With full deletion on, every member's client removes it; otherwise
    /// each shows it as deleted.
    public func deleteGroupMessage(_ messageID: String, in reference: String) async throws(RallyClientError) {
        try await groupService.deleteMessage(messageID, in: reference)
    }

    /// A direct message to another member of a group, if the group's
    /// `direct_messages` preference lets you (the recipient's client checks
    /// it too).
    public func sendDirectToMember(
        _ text: String, to member: InboxID, in reference: String
    ) async throws(RallyClientError) -> StoredMessage {
        try await groupService.sendDirect(text, to: member, in: reference, messages: directMessages)
    }

    /// Changes the group's preferences (owner); keys not given stay as
    /// they are. See ``GroupPreferences/Key``.
    public func setGroupPreferences(
        _ changes: [GroupPreferences.Key: GroupPreference], in reference: String
    ) async throws(RallyClientError) -> GroupRecord {
        try await groupService.setPreferences(
            Dictionary(uniqueKeysWithValues: changes.map { ($0.key.rawValue, $0.value) }), in: reference)
    }

    /// The group's stored messages, oldest first.
    public func groupMessages(in reference: String) throws(RallyClientError) -> [StoredMessage] {
        try groupService.messages(in: reference)
    }

    /// A group message as members are shown it: under its sender's name in
    /// the group's signed member record, never the name the sender wrote.
    public nonisolated func asShown(_ message: StoredMessage) -> StoredMessage {
        groupService.asShown(message)
    }

    /// Reads the group log from the stored cursor up to its head.
    @discardableResult
    public func syncGroup(_ reference: String) async throws(RallyClientError) -> GroupSyncReport {
        try await groupLog.sync(reference)
    }

    /// Streams a group's log; every entry is applied and persisted before
    /// `handler` sees it.
    public func followGroup(
        _ reference: String, untilCaughtUp: Bool, handler: @Sendable (GroupLogEvent) async -> Void
    ) async throws(RallyClientError) {
        try await groupLog.follow(reference, untilCaughtUp: untilCaughtUp, handler: handler)
    }

    // MARK: Inviter's desk

    /// Creates a signed invite to a group this identity administers.
    /// - Parameters:
    ///   - options: Expiry, uses, role, and the name shown to joiners.
    ///   - now: When the invite is made (its expiry counts from here).
    /// - Throws: `.invite(.notAdmin)`, `.invite(.invalidOptions)`,
    ///   `.invite(.noInviteKeys)`, or a relay failure.
    public func createInvite(
        in reference: String, options: InviteOptions = InviteOptions(), now: Date? = nil
    ) async throws(RallyClientError) -> CreatedInvite {
        try await inviterDesk.createInvite(in: reference, options: options, now: now ?? context.clock.now())
    }

    /// Revokes every outstanding invite of a group (rotates its tag).
    public func revokeInvites(in reference: String) async throws(RallyClientError) {
        try await inviterDesk.revokeInvites(in: reference)
    }

    /// Lifts this client's block on an inbox's join requests to a group.
    /// - Returns: Whether there was one.
    @discardableResult
    public func unblockJoinSender(_ inbox: InboxID, in reference: String) throws(RallyClientError) -> Bool {
        try inviterDesk.unblockJoinSender(inbox, in: reference)
    }

    /// Who this client blocked from a group's join requests, and why.
    public func blockedJoinSenders(in reference: String) throws(RallyClientError) -> [(inbox: String, reason: String)] {
        try inviterDesk.blockedJoinSenders(in: reference)
    }

    /// Reads every invite inbox this client holds keys for, up to its
    /// head, and answers each request (admit, or a typed join error).
    @discardableResult
    public func processJoinRequests() async throws(RallyClientError) -> [JoinRequestReport] {
        try await inviterDesk.processJoinRequests()
    }

    // MARK: Joins

    /// Validates an invite locally and, if it holds, sends a join request.
    /// - Parameters:
    ///   - text: The invite: a link, a `rally://` URL or the bare slug.
    ///   - now: The time the invite's expiry is judged at (nil: the clock's).
    /// - Throws: `.invite(.invalidInvite)` (nothing was sent) or
    ///   `.invite(.joinInboxUnknown)` when the invite is for another relay.
    public func startJoin(_ text: String, now: Date? = nil) async throws(RallyClientError) -> JoinAttempt {
        try await joins.start(text, now: now ?? context.clock.now())
    }

    /// Follows the inbox until the join ends (joined, failed or cancelled)
    /// or `timeout` passes.
    /// - Parameter onChange: Sees every new state of the attempt.
    /// - Returns: The attempt as it stands.
    public func waitForJoin(
        requestID: String, timeout: Duration? = nil,
        onChange: @escaping @Sendable (JoinAttempt) async -> Void = { _ in }
    ) async throws(RallyClientError) -> JoinAttempt {
        let inbox = self.inbox
        return try await joins.wait(for: requestID, timeout: timeout, onChange: onChange) { tick in
            try await inbox.follow(untilCaughtUp: false) { _ in tick() }
        }
    }

    /// This identity's join attempts, newest first.
    public func joinAttempts() throws(RallyClientError) -> [JoinAttempt] {
        try joins.attempts()
    }

    /// The attempt with this request id (or a unique prefix of it).
    /// - Throws: `.invite(.noJoin)`.
    public func joinAttempt(_ requestID: String) throws(RallyClientError) -> JoinAttempt {
        try joins.attempt(requestID)
    }

    /// The newest join that is still under way.
    public func currentJoin() throws(RallyClientError) -> JoinAttempt? {
        try joins.attempts().first { !$0.isFinal }
    }

    /// Cancels a join under way; an answer arriving later is dropped (and
    /// a group it opens is left).
    public func cancelJoin(_ requestID: String) throws(RallyClientError) -> JoinAttempt {
        try joins.cancel(requestID)
    }

    // MARK: Watch

    /// Keeps this client online: follows the inbox, every active group's
    /// log and the invite inbox of every group it administers, answering
    /// join requests as they arrive, until cancelled or a follower fails
    /// for good.
    public func watch(handler: @escaping @Sendable (WatchEvent) async -> Void) async throws(RallyClientError) {
        try await watcher.watch(handler: handler)
    }

    // MARK: Vaults

    /// Creates a vault: its key stays in this home, its log on the relay
    /// (ADR 0014).
    /// - Throws: `.vault(.invalidName)`, or the relay's refusal.
    public func createVault(name: String) async throws(RallyClientError) -> VaultSummary {
        try await vaults.create(name: name)
    }

    /// The vault whose id or name is `text`.
    /// - Throws: `.vault(.unknownVault)` or `.vault(.ambiguousVault)`.
    public func vault(_ text: String) throws(RallyClientError) -> VaultSummary {
        let record = try vaults.resolve(text)
        guard let summary = try vaults.list().first(where: { $0.id == record.id }) else {
            throw .vault(.unknownVault(text))
        }
        return summary
    }

    /// The vaults this home owns or can read, after reading its inbox.
    public func vaultList() async throws(RallyClientError) -> [VaultSummary] {
        // Vaults granted (or revoked) by their owners arrive by message.
        _ = try await inbox.sync()
        return try vaults.list()
    }

    /// Seals `file` with a key of its own, uploads it in segments
    /// (resuming after a dropped connection) and records it in the vault.
    /// `vault` is an id or a unique name; `name` defaults to the file's.
    public func addDocument(
        to vault: String, file: URL, name: String? = nil,
        progress: @escaping @Sendable (TransferProgress) -> Void = { _ in }
    ) async throws(RallyClientError) -> VaultDocumentSummary {
        try await vaults.add(vault, file: file, name: name, progress: progress)
    }

    /// The vault's documents after reading its log from the relay.
    public func documents(in vault: String) async throws(RallyClientError) -> [VaultDocumentSummary] {
        try await readGrants(for: vault)
        return try await vaults.documents(vault)
    }

    /// A nominee's grants and revocations arrive by direct message: read
    /// them before acting on a vault this home does not own.
    private func readGrants(for vault: String) async throws(RallyClientError) {
        if (try? vaults.resolve(vault))?.isOwner != true { _ = try await inbox.sync() }
    }

    /// Downloads and checks a document (an id or a unique name) and writes
    /// it to `output`; nothing is written unless every check passes.
    public func fetchDocument(
        _ document: String, from vault: String, to output: URL,
        progress: @escaping @Sendable (TransferProgress) -> Void = { _ in }
    ) async throws(RallyClientError) -> VaultDocumentSummary {
        try await readGrants(for: vault)
        return try await vaults.get(vault, document: document, to: output, progress: progress)
    }

    /// Removes a document from the vault and its blob from the relay.
    public func removeDocument(
        _ document: String, from vault: String
    ) async throws(RallyClientError)
        -> VaultDocumentSummary
    {
        try await vaults.remove(vault, document: document)
    }

    // MARK: Nominees

    /// How long a nominee invitation stays valid unless the owner says
    /// otherwise: 7 days.
    public static let nomineeInvitationLifetime = NomineeService.defaultLifetime

    /// Invites `invitee` to the vault as a nominee: a pending nominee and
    /// an interactive "🔐 Vault Invitation" message with a single-use token
    /// that expires after `lifetime` and works only for `invitee`. With
    /// `emergencyWait` (1 minute to 90 days), confirming gives emergency
    /// access instead of the key: the nominee asks, and the relay releases
    /// the key when the owner approves or the wait passes unrejected.
    public func inviteNominee(
        to vault: String, invitee: InboxID, name: String, phone: String? = nil, email: String? = nil,
        lifetime: Duration = RallyClient.nomineeInvitationLifetime, emergencyWait: Duration? = nil
    ) async throws(RallyClientError) -> NomineeInvitationSent {
        try await nominees.invite(
            vault: vault, to: invitee, name: name, phone: phone, email: email, lifetime: lifetime,
            emergencyWait: emergencyWait)
    }

    /// The vault's nominees and their status, after reading this inbox.
    public func nominees(of vault: String) async throws(RallyClientError) -> [NomineeSummary] {
        _ = try await inbox.sync()
        return try nominees.nominees(vault: vault)
    }

    /// Seals the vault key to a nominee who accepted (status `active`).
    public func confirmNominee(_ nominee: String, of vault: String) async throws(RallyClientError) -> NomineeSummary {
        _ = try await inbox.sync()
        return try await nominees.confirm(vault: vault, nominee: nominee)
    }

    /// Revokes a nominee: their token is dead and, if they held the key,
    /// the vault moves to a new one.
    public func revokeNominee(_ nominee: String, of vault: String) async throws(RallyClientError) -> NomineeSummary {
        _ = try await inbox.sync()
        return try await nominees.revoke(vault: vault, nominee: nominee)
    }

    /// The vault invitations this identity received, after reading its
    /// inbox.
    public func vaultInvitations() async throws(RallyClientError) -> [VaultInvitationSummary] {
        _ = try await inbox.sync()
        return try nominees.invitations()
    }

    /// The invitation a token or nominee link names, if this identity
    /// received it.
    public func vaultInvitation(matching tokenOrLink: String) async throws(RallyClientError) -> VaultInvitationSummary?
    {
        _ = try await inbox.sync()
        return try nominees.invitation(matching: tokenOrLink)
    }

    /// Accepts the invitation a token or nominee link names.
    public func acceptVaultInvitation(_ tokenOrLink: String) async throws(RallyClientError) -> NomineeResponse {
        _ = try await inbox.sync()
        return try await nominees.respond(tokenOrLink, accept: true)
    }

    /// Declines the invitation a token or nominee link names; the owner
    /// stores the decline.
    public func declineVaultInvitation(_ tokenOrLink: String) async throws(RallyClientError) -> NomineeResponse {
        _ = try await inbox.sync()
        return try await nominees.respond(tokenOrLink, accept: false)
    }

    // MARK: Emergency access

    /// Where a nominee's emergency access stands on the relay (owner).
    public func emergencyAccess(
        of nominee: String, in vault: String
    ) async throws(RallyClientError)
        -> EmergencyAccessStatus
    {
        _ = try await inbox.sync()
        return try await nominees.emergencyStatus(vault: vault, nominee: nominee)
    }

    /// Approves a nominee's request for emergency access: the relay
    /// releases the key at once.
    public func approveEmergencyAccess(
        of nominee: String, in vault: String
    ) async throws(RallyClientError)
        -> EmergencyAccessStatus
    {
        _ = try await inbox.sync()
        return try await nominees.decideEmergency(vault: vault, nominee: nominee, approve: true)
    }

    /// Rejects a nominee's request for emergency access: the relay never
    /// releases the key for it (a new request starts a new wait).
    public func rejectEmergencyAccess(
        of nominee: String, in vault: String
    ) async throws(RallyClientError)
        -> EmergencyAccessStatus
    {
        _ = try await inbox.sync()
        return try await nominees.decideEmergency(vault: vault, nominee: nominee, approve: false)
    }

    /// Asks for emergency access to a vault (by invitation id, vault name
    /// or vault id); the owner is told and may approve or reject before
    /// the wait ends.
    public func requestEmergencyAccess(_ vault: String) async throws(RallyClientError) -> EmergencyAccessStatus {
        _ = try await inbox.sync()
        return try await nominees.emergency.request(vault)
    }

    /// Where this nominee's emergency access stands; once the relay
    /// released it, the vault key is installed (`granted`) and the vault
    /// reads like any other.
    public func checkEmergencyAccess(_ vault: String) async throws(RallyClientError) -> EmergencyAccessStatus {
        _ = try await inbox.sync()
        let (status, grant) = try await nominees.emergency.check(vault)
        if let grant { try await nominees.handle(grant) }
        return status
    }
}
