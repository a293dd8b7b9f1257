// swift-tools-version:6.2
import PackageDescription

let strict: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .enableUpcomingFeature("ExistentialAny"),
]

/// Imports are internal unless a file says `public import`: a module's
/// dependencies (the generated wire types among them) reach its public API
/// only on purpose. RallyWire itself is the wire types, generated code that
/// imports SwiftProtobuf the classic way.
let strictImports: [SwiftSetting] = strict + [.enableUpcomingFeature("InternalImportsByDefault")]

let package = Package(
    name: "Rally",
    platforms: [.macOS(.v14), .iOS(.v17), .tvOS(.v17)],
    products: [
        .library(name: "RallyWire", targets: ["RallyWire"]),
        .library(name: "RallyCrypto", targets: ["RallyCrypto"]),
        .library(name: "RallyRelay", targets: ["RallyRelay"]),
        .library(name: "RallyCore", targets: ["RallyCore"]),
        .library(name: "RallyViewModels", targets: ["RallyViewModels"]),
        .library(name: "RallyTesting", targets: ["RallyTesting"]),
        .executable(name: "rally", targets: ["rally"]),
        .executable(name: "rally-bench", targets: ["rally-bench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-protobuf.git", from: "1.39.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
        .package(url: "https://github.com/hummingbird-project/swift-websocket.git", from: "1.6.2"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.3"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/adam-fowler/compress-nio.git", from: "1.5.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
    ],
    targets: [
        .target(
            name: "RallyWire",
            dependencies: [.product(name: "SwiftProtobuf", package: "swift-protobuf")],
            exclude: ["Proto"],
            swiftSettings: strict
        ),
        .target(
            name: "RallyCrypto",
            dependencies: [
                "RallyWire",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strictImports
        ),
        .target(
            name: "RallyRelay",
            dependencies: [
                "RallyWire",
                "RallyCrypto",
                // The segment log's CRC-32C with the processor's instruction.
                "CRallyCRC32C",
                // SQLite without its allocation-wide mutex (docs/adr/0042).
                "CRallySQLite",
                // SHA-256 over a blob, streamed from its file.
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                // The relay's own WebSocket path (docs/adr/0025): the
                // upgrade, the frame codec and the HTTP/1 pipeline beside it.
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "WSCore", package: "swift-websocket"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                // The error a streamed body past its limit throws.
                .product(name: "NIOCore", package: "swift-nio"),
                // Push: the relay calls registered webhooks (https).
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                // The store several relay nodes share, and TLS to it.
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: strictImports
        ),
        .target(
            name: "RallyCore",
            dependencies: [
                "RallyWire",
                "RallyCrypto",
                // SQLite without its allocation-wide mutex (docs/adr/0042).
                "CRallySQLite",
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictImports
        ),
        // An in-memory relay and an intercepting transport, for apps' and
        // the SDK's own unit tests of client flows without sockets.
        .target(
            name: "RallyTesting",
            dependencies: ["RallyCore", "RallyCrypto", "RallyWire"],
            swiftSettings: strictImports
        ),
        .target(
            name: "RallyQR",
            dependencies: [
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: strictImports
        ),
        .target(
            name: "RallyViewModels",
            dependencies: ["RallyCore"],
            swiftSettings: strictImports
        ),
        .target(
            name: "RallyCLI",
            dependencies: [
                "RallyCore",
                "RallyRelay",
                "RallyQR",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictImports
        ),
        .executableTarget(
            name: "rally",
            dependencies: [
                "RallyCLI",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strictImports
        ),
        // A load generator on plain sockets for the relay bench (and its tests).
        .target(
            name: "RallyWireLoad",
            dependencies: [
                "RallyWire", "RallyCrypto", "CLoadEpoll",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strictImports
        ),
        .target(name: "CLoadEpoll"),
        .target(name: "CRallyCRC32C"),
        // SQLite's process-wide settings, which Swift cannot reach
        // (sqlite3_config is variadic).
        .target(name: "CRallySQLite", linkerSettings: [.linkedLibrary("sqlite3")]),
        // Benchmarks that print measurements; see the README.
        .executableTarget(
            name: "rally-bench",
            dependencies: [
                "RallyCore", "RallyRelay", "RallyCrypto", "RallyWire", "RallyWireLoad",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Sources/RallyBench",
            swiftSettings: strictImports
        ),
        // libFuzzer target for invite decoding; see scripts/fuzz-invite.sh.
        .executableTarget(
            name: "rally-fuzz-invite",
            dependencies: ["RallyCore", "RallyCrypto"],
            path: "Sources/RallyFuzzInvite",
            swiftSettings: strictImports
        ),
        .target(
            name: "RallyTestSupport",
            dependencies: [
                "RallyCore", "RallyRelay", "RallyTesting",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                // The fault proxy: a real TCP proxy between clients and a relay.
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                // A database of its own per test in the run's PostgreSQL.
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/RallyTestSupport",
            swiftSettings: strictImports
        ),
        .testTarget(
            name: "RallyWireTests",
            dependencies: ["RallyWire"],
            swiftSettings: strictImports
        ),
        .testTarget(
            name: "RallyCryptoTests",
            dependencies: ["RallyCrypto"],
            swiftSettings: strictImports
        ),
        .testTarget(
            name: "RallyRelayTests",
            dependencies: [
                "RallyRelay", "RallyWire", "RallyCrypto", "RallyTestSupport", "RallyWireLoad", "CRallySQLite",
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                // The writer's and the socket's event-loop paths, driven on
                // real and embedded loops.
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ],
            swiftSettings: strictImports
        ),
        .testTarget(
            name: "RallyQRTests",
            dependencies: [
                "RallyQR", "RallyTestSupport",
                // Inflates the PNG's IDAT stream in the PNG tests.
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: strictImports
        ),
        .testTarget(
            name: "RallyCoreTests",
            dependencies: [
                "RallyCore", "RallyTestSupport", "RallyTesting", "CRallySQLite",
                // Builds homes as earlier versions left them.
                .product(name: "GRDB", package: "GRDB.swift"),
            ],
            swiftSettings: strictImports
        ),
        .testTarget(
            name: "RallyEndToEndTests",
            dependencies: ["RallyCLI", "RallyViewModels", "RallyTestSupport", "RallyTesting", "rally"],
            swiftSettings: strictImports
        ),
    ]
)
