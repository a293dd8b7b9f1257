#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A TCP connection to a port on 127.0.0.1 as a plain file descriptor,
/// for clients that do their own reads and writes (this load generator,
/// and tests that send exactly the bytes they want).
public enum LoopbackTCP {
    #if canImport(Glibc)
        static let streamType = Int32(SOCK_STREAM.rawValue)
    #else
        static let streamType = SOCK_STREAM
    #endif

    /// Connects, blocking. `receiveBufferBytes` is set before connecting,
    /// so the window the peer sees is that small; `receiveTimeoutSeconds`
    /// bounds each blocking read. Returns the descriptor, or the `errno`
    /// of the call that failed.
    public static func connect(
        port: Int, receiveBufferBytes: Int32? = nil, receiveTimeoutSeconds: Int? = nil
    ) -> Result<Int32, LoopbackTCPError> {
        let fd = socket(AF_INET, streamType, 0)
        guard fd >= 0 else { return .failure(LoopbackTCPError(call: "socket", errno: errno)) }
        if var bytes = receiveBufferBytes {
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, socklen_t(MemoryLayout<Int32>.size))
        }
        if let seconds = receiveTimeoutSeconds {
            var timeout = timeval(tv_sec: seconds, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connectSocket(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            let failure = errno
            close(fd)
            return .failure(LoopbackTCPError(call: "connect", errno: failure))
        }
        return .success(fd)
    }

    #if canImport(Glibc)
        private static let connectSocket = Glibc.connect
    #else
        private static let connectSocket = Darwin.connect
    #endif
}

public struct LoopbackTCPError: Error, Equatable, Sendable {
    public var call: String
    public var errno: Int32
}
