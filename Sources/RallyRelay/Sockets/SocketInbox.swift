import NIOCore

/// The order and flow of one socket's received messages, free of the
/// socket: messages queue in the order received, one drain at a time
/// hands them on, and reading stops while too many wait.
///
/// The socket keeps it under a lock; each call returns what the socket
/// must do (start a drain, stop or resume reading).
struct SocketInbox<Message> {
    /// Reading stops when this many messages wait…
    let pauseAt: Int
    /// …and resumes once the drain is down to this many.
    let resumeAt: Int

    /// Room for one to start with (NIO's default is 16): most of the time
    /// a connection has nothing waiting, and there are thousands of them.
    private var queue = CircularBuffer<Message>(initialCapacity: 1)
    /// A drain is under way, or taking has not started: nothing is handed
    /// on before ``start()``.
    private(set) var isDraining = true
    private(set) var isReadingPaused = false
    private(set) var isClosed = false

    init(pauseAt: Int, resumeAt: Int) {
        precondition(pauseAt > resumeAt && resumeAt >= 0, "pause above resume")
        self.pauseAt = pauseAt
        self.resumeAt = resumeAt
    }

    var count: Int { queue.count }

    /// Nothing waits and nothing is being handed on: a message may be
    /// taken care of right away, ahead of no other.
    var isIdle: Bool { !isDraining && !isClosed && queue.isEmpty }

    /// A message arrived. Returns whether a drain must start and whether
    /// reading must stop.
    mutating func receive(_ message: Message) -> (startDrain: Bool, pauseReading: Bool) {
        guard !isClosed else { return (false, false) }
        queue.append(message)
        var pause = false
        if queue.count >= pauseAt, !isReadingPaused {
            isReadingPaused = true
            pause = true
        }
        guard !isDraining else { return (false, pause) }
        isDraining = true
        return (true, pause)
    }

    /// Messages may be handed on from now. Returns whether a drain must
    /// start (some arrived before).
    mutating func start() -> Bool {
        guard !isClosed, !queue.isEmpty else {
            isDraining = false
            return false
        }
        return true
    }

    /// The next message for the drain, or nil when it is to end (the drain
    /// is then over); and whether reading must resume.
    mutating func next() -> (message: Message?, resumeReading: Bool) {
        guard !isClosed, let message = queue.popFirst() else {
            isDraining = false
            return (nil, false)
        }
        if isReadingPaused, queue.count <= resumeAt {
            isReadingPaused = false
            return (message, true)
        }
        return (message, false)
    }

    /// Nothing more is taken or handed on.
    mutating func close() {
        isClosed = true
        queue.removeAll()
    }
}
