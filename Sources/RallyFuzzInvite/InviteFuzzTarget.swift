import Foundation
import RallyCore
import RallyCrypto

/// A coverage-guided fuzz target for everything that reads an invite: link
/// parsing, base64url, the slug header, inflating with its bomb limit, the
/// protobuf, keys, signature and expiry. It must never crash, hang or
/// allocate without bound, whatever the bytes.
///
/// The first byte chooses the layer the rest reaches first, so the fuzzer
/// gets past base64 quickly: 0 pasted text, 1 the slug's bytes (header,
/// compression, protobuf), 2 the inflated body (protobuf onwards).
///
/// Run it with libFuzzer (see scripts/fuzz-invite.sh):
///     swift build --scratch-path .build-fuzz --product rally-fuzz-invite \
///       -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library -Xswiftc -DRALLY_LIBFUZZER
/// Without libFuzzer the binary replays the files it is given, so a crash
/// input can be re-run under a debugger.
enum InviteFuzzTarget {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    /// Version 1, deflate: the header of a compressed slug.
    static let deflatedHeader: UInt8 = InviteSlug.version << 4 | 1

    static func exercise(_ data: Data) {
        guard let mode = data.first else {
            _ = try? Invite.parse("", now: now)
            return
        }
        let rest = Data(data.dropFirst())
        switch mode % 3 {
        case 0:
            _ = try? Invite.parse(String(decoding: rest, as: UTF8.self), now: now)
        case 1:
            _ = try? Invite.parse(rest.base64URLEncoded(), now: now)
        default:
            let slug = (Data([deflatedHeader]) + Deflate.compress(rest, format: .raw)).base64URLEncoded()
            _ = try? Invite.parse(slug, now: now)
        }
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func rallyFuzzInvite(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    InviteFuzzTarget.exercise(start.map { Data(bytes: $0, count: count) } ?? Data())
    return 0
}

#if RALLY_LIBFUZZER
    // SwiftPM names an executable's entry point itself, so libFuzzer's own
    // `main` is not used: the entry point hands over to libFuzzer's driver.
    @_silgen_name("LLVMFuzzerRunDriver")
    func runFuzzerDriver(
        _ argc: UnsafeMutablePointer<CInt>,
        _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
        _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
    ) -> CInt

    @main
    struct InviteFuzzMain {
        static func main() {
            var argc = CommandLine.argc
            var argv = CommandLine.unsafeArgv
            exit(runFuzzerDriver(&argc, &argv, rallyFuzzInvite))
        }
    }
#else
    /// Replays inputs (files) through the target.
    @main
    struct InviteFuzzReplay {
        static func main() throws {
            let paths = CommandLine.arguments.dropFirst()
            for path in paths {
                InviteFuzzTarget.exercise(try Data(contentsOf: URL(fileURLWithPath: path)))
            }
            print("replayed \(paths.count) input(s) without a crash")
        }
    }
#endif
