import Foundation
import NIOWebSocket

extension Data {
    /// A client frame's message, unmasked straight into the `Data` the
    /// protobuf decoder reads: one copy, where `unmaskedData` and then
    /// `Data(_:)` made two. A frame without a mask key (one the aggregator
    /// already joined and unmasked) is copied as it is.
    init(unmasking frame: WebSocketFrame) {
        let masked = frame.data
        guard let key = frame.maskKey else {
            self.init(masked.readableBytesView)
            return
        }
        self.init(count: masked.readableBytes)
        let keyBytes = (key[0], key[1], key[2], key[3])
        // Eight bytes at a time, with the key repeated twice.
        let word = Swift.withUnsafeBytes(of: (keyBytes, keyBytes)) { $0.loadUnaligned(as: UInt64.self) }
        withUnsafeMutableBytes { output in
            masked.withUnsafeReadableBytes { input in
                let count = input.count
                var index = 0
                while index + 8 <= count {
                    let value = input.loadUnaligned(fromByteOffset: index, as: UInt64.self) ^ word
                    output.storeBytes(of: value, toByteOffset: index, as: UInt64.self)
                    index += 8
                }
                while index < count {
                    output[index] = input[index] ^ key[index % 4]
                    index += 1
                }
            }
        }
    }
}
