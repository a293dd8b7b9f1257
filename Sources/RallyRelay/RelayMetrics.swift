import Prometheus
import RallyWire

/// The relay's Prometheus metrics. Each relay owns its registry (no global
/// MetricsSystem bootstrap), so several relays can run in one process.
final class RelayMetrics: Sendable {
    let registry: PrometheusCollectorRegistry
    let publishes: Counter
    let duplicates: Counter
    let deliveries: Counter
    let liveWrites: Counter
    let openConnections: Gauge
    let commitBatchSize: ValueHistogram
    let commitLatency: DurationHistogram
    let prunedEnvelopes: Counter
    let pushes: Counter
    let pushRetries: Counter
    let pushesDropped: Counter
    let pushTargetsGone: Counter

    init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
        publishes = registry.makeCounter(
            descriptor: Self.name("publishes", unit: "total", help: "Envelopes stored (duplicates excluded)."))
        duplicates = registry.makeCounter(
            descriptor: Self.name(
                "duplicate_publishes", unit: "total", help: "Retried publishes answered with the stored seq."))
        deliveries = registry.makeCounter(
            descriptor: Self.name("deliveries", unit: "total", help: "Envelopes sent to subscribers."))
        liveWrites = registry.makeCounter(
            descriptor: Self.name(
                "live_writes", unit: "total",
                help: "Deliveries the commit that stored the envelope wrote itself, not the subscription's task."))
        openConnections = registry.makeGauge(
            descriptor: Self.name("open_connections", unit: "", help: "Open WebSocket connections."))
        commitBatchSize = registry.makeValueHistogram(
            descriptor: Self.name("commit_batch_size", unit: "", help: "Publishes per group-commit transaction."),
            buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512])
        commitLatency = registry.makeDurationHistogram(
            descriptor: Self.name(
                "commit_duration", unit: "seconds", help: "Time to commit one group-commit transaction."),
            buckets: [
                .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10),
                .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250), .seconds(1),
            ])
        prunedEnvelopes = registry.makeCounter(
            descriptor: Self.name("pruned_envelopes", unit: "total", help: "Expired envelopes deleted."))
        pushes = registry.makeCounter(
            descriptor: Self.name("pushes", unit: "total", help: "Push calls a target acknowledged."))
        pushRetries = registry.makeCounter(
            descriptor: Self.name("push_retries", unit: "total", help: "Failed push calls scheduled again."))
        pushesDropped = registry.makeCounter(
            descriptor: Self.name(
                "pushes_dropped", unit: "total", help: "Push notifications given up or refused by their target."))
        pushTargetsGone = registry.makeCounter(
            descriptor: Self.name("push_targets_gone", unit: "total", help: "Push targets removed after 404 or 410."))
    }

    func recordError(_ code: WireErrorCode) {
        // The registry hands back the same counter for the same labels.
        registry.makeCounter(
            descriptor: Self.name("errors", unit: "total", help: "Error answers sent, by error code."),
            labels: [("code", code.name)]
        ).increment()
    }

    private static func name(_ metric: String, unit: String, help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(namespace: "rally", subsystem: "relay", metricName: metric, unitName: unit, helpText: help)
    }

    func exposition() -> String {
        registry.emitToString()
    }
}
