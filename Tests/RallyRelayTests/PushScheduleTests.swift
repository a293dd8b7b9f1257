import Foundation
import Testing

@testable import RallyRelay

/// The push schedule's rules on explicit times: coalescing, the per-inbox
/// rate, retries with doubling pauses, and what a gone or refusing target
/// does.
@Suite("Push schedule")
struct PushScheduleTests {
    /// The schedule in a box, so `#expect` can call its mutating methods.
    final class Box {
        var schedule: PushSchedule
        init(_ schedule: PushSchedule) { self.schedule = schedule }
        func arrived(inbox: String, now: Duration) -> Bool { schedule.arrived(inbox: inbox, now: now) }
        func due(now: Duration) -> [PushSchedule.Call] { schedule.due(now: now) }
        func finished(
            _ call: PushSchedule.Call, _ outcome: PushSchedule.Outcome, now: Duration
        )
            -> PushSchedule.Finished
        { schedule.finished(call, outcome, now: now) }
        func forget(inbox: String) { schedule.forget(inbox: inbox) }
        var nextDue: Duration? { schedule.nextDue }
        var waitingCount: Int { schedule.waitingCount }
        var inFlightCount: Int { schedule.inFlightCount }
    }

    static func schedule(_ configure: (inout PushLimits) -> Void = { _ in }) -> Box {
        var limits = PushLimits()
        configure(&limits)
        var serial = 0
        return Box(
            PushSchedule(limits: limits) {
                serial += 1
                return "n\(serial)"
            })
    }

    static func at(_ seconds: Double) -> Duration { .milliseconds(Int64(seconds * 1000)) }

    @Test func aBurstOfEnvelopesIsOnePush() {
        let schedule = Self.schedule()
        #expect(schedule.arrived(inbox: "bob", now: .zero))
        #expect(!schedule.arrived(inbox: "bob", now: .zero))
        #expect(!schedule.arrived(inbox: "bob", now: Self.at(0.1)))
        let calls = schedule.due(now: Self.at(0.1))
        #expect(calls == [.init(inbox: "bob", notificationID: "n1", attempt: 1)])
        #expect(schedule.due(now: Self.at(0.1)).isEmpty)
        #expect(schedule.finished(calls[0], .delivered, now: Self.at(0.2)) == .delivered(calls[0]))
        #expect(schedule.waitingCount == 0)
        #expect(schedule.nextDue == nil)
    }

    @Test func pushesToOneInboxAreAtLeastTheIntervalApartAndTheLastIsNeverLost() {
        let schedule = Self.schedule { $0.minInterval = .seconds(2) }
        _ = schedule.arrived(inbox: "bob", now: .zero)
        let first = schedule.due(now: .zero)[0]
        _ = schedule.finished(first, .delivered, now: Self.at(0.5))
        // One second later: waits until 2 s after the last push.
        #expect(schedule.arrived(inbox: "bob", now: Self.at(1.5)))
        #expect(schedule.due(now: Self.at(1.5)).isEmpty)
        #expect(schedule.nextDue == Self.at(2.5))
        #expect(schedule.due(now: Self.at(2.5)) == [.init(inbox: "bob", notificationID: "n2", attempt: 1)])
        // Another inbox is not held back by Bob's rate.
        #expect(schedule.arrived(inbox: "carol", now: Self.at(2.5)))
        #expect(schedule.due(now: Self.at(2.5)).map(\.inbox) == ["carol"])
    }

    @Test func anEnvelopeThatArrivesDuringTheCallGetsAPushOfItsOwn() {
        let schedule = Self.schedule { $0.minInterval = .seconds(2) }
        _ = schedule.arrived(inbox: "bob", now: .zero)
        let call = schedule.due(now: .zero)[0]
        #expect(!schedule.arrived(inbox: "bob", now: Self.at(0.1)))
        _ = schedule.finished(call, .delivered, now: Self.at(0.3))
        #expect(schedule.waitingCount == 1)
        #expect(schedule.nextDue == Self.at(2.3))
        #expect(schedule.due(now: Self.at(2.3)).map(\.notificationID) == ["n2"])
    }

    @Test func aFailedCallIsRetriedWithDoublingPausesUnderTheSameIDThenGivenUp() {
        let schedule = Self.schedule {
            $0.maxAttempts = 4
            $0.firstRetry = .seconds(1)
            $0.maxRetry = .seconds(3)
        }
        _ = schedule.arrived(inbox: "bob", now: .zero)
        var now = Duration.zero
        var pauses: [Duration] = []
        var call = schedule.due(now: now)[0]
        for attempt in 1...3 {
            #expect(call.attempt == attempt && call.notificationID == "n1")
            guard case .retryScheduled(let next, let at) = schedule.finished(call, .failed(retryAfter: nil), now: now)
            else {
                Issue.record("attempt \(attempt) was not retried")
                return
            }
            pauses.append(at - now)
            #expect(schedule.due(now: at - .milliseconds(1)).isEmpty)
            now = at
            call = schedule.due(now: now)[0]
            #expect(call == next)
        }
        #expect(pauses == [.seconds(1), .seconds(2), .seconds(3)])
        #expect(schedule.finished(call, .failed(retryAfter: nil), now: now) == .gaveUp(call))
        #expect(schedule.waitingCount == 0)
    }

    @Test func aReceiverAskingForMoreTimeGetsItWithinTheLongestPause() {
        let schedule = Self.schedule { $0.maxRetry = .seconds(60) }
        _ = schedule.arrived(inbox: "bob", now: .zero)
        let call = schedule.due(now: .zero)[0]
        #expect(
            schedule.finished(call, .failed(retryAfter: .seconds(30)), now: .zero)
                == .retryScheduled(.init(inbox: "bob", notificationID: "n1", attempt: 2), at: .seconds(30)))
        let again = schedule.due(now: .seconds(30))[0]
        #expect(
            schedule.finished(again, .failed(retryAfter: .seconds(3600)), now: .seconds(30))
                == .retryScheduled(.init(inbox: "bob", notificationID: "n1", attempt: 3), at: .seconds(90)))
    }

    @Test func aGoneTargetIsDroppedAndARefusingOneLosesOnlyThisNotification() {
        let schedule = Self.schedule()
        _ = schedule.arrived(inbox: "bob", now: .zero)
        _ = schedule.arrived(inbox: "carol", now: .zero)
        let calls = schedule.due(now: .zero).sorted { $0.inbox < $1.inbox }
        #expect(schedule.finished(calls[0], .gone, now: .zero) == .targetGone(inbox: "bob"))
        #expect(schedule.finished(calls[1], .refused, now: .zero) == .refused(calls[1]))
        #expect(schedule.waitingCount == 0 && schedule.inFlightCount == 0)
    }

    @Test func callsInFlightAndInboxesWaitingAreBounded() {
        let schedule = Self.schedule {
            $0.maxInFlight = 2
            $0.maxWaiting = 3
        }
        for inbox in ["a", "b", "c"] { #expect(schedule.arrived(inbox: inbox, now: .zero)) }
        #expect(!schedule.arrived(inbox: "d", now: .zero))
        let first = schedule.due(now: .zero)
        #expect(first.map(\.inbox) == ["a", "b"])
        #expect(schedule.due(now: .zero).isEmpty)
        _ = schedule.finished(first[0], .delivered, now: .zero)
        #expect(schedule.due(now: .zero).map(\.inbox) == ["c"])
    }

    @Test func forgettingAnInboxMidCallMakesItsAnswerStale() {
        let schedule = Self.schedule()
        _ = schedule.arrived(inbox: "bob", now: .zero)
        let call = schedule.due(now: .zero)[0]
        schedule.forget(inbox: "bob")
        #expect(schedule.inFlightCount == 0)
        #expect(schedule.finished(call, .delivered, now: .zero) == .stale(call))
        #expect(schedule.arrived(inbox: "bob", now: .zero))
    }
}

@Suite("Push targets and answers")
struct PushTargetPolicyTests {
    static let production = PushLimits()
    static var local: PushLimits {
        var limits = PushLimits()
        limits.allowsInsecureTargets = true
        limits.allowsPrivateTargets = true
        return limits
    }

    @Test(arguments: [
        "https://push.example.com/v1/devices/abc", "https://push.example.com:8443/hook?token=x",
        "https://[2001:db8::1]/hook", "https://8.8.8.8/hook",
    ])
    func publicHTTPSTargetsAreAccepted(_ text: String) throws {
        #expect(try PushTargetPolicy.validate(text, limits: Self.production).absoluteString == text)
    }

    @Test(arguments: [
        ("", "push target is empty"),
        ("http://push.example.com/hook", "push target must be an https URL"),
        ("ftp://push.example.com/hook", "push target must be an https URL"),
        ("/relative/hook", "push target is not an absolute URL"),
        ("https://user:pw@push.example.com/hook", "push target must not carry credentials"),
        ("https://push.example.com/hook#part", "push target must not have a fragment"),
        ("https://127.0.0.1/hook", "push target must not point at a loopback, private or link-local address"),
        ("https://10.1.2.3/hook", "push target must not point at a loopback, private or link-local address"),
        ("https://172.20.0.1/hook", "push target must not point at a loopback, private or link-local address"),
        ("https://192.168.1.1/hook", "push target must not point at a loopback, private or link-local address"),
        ("https://169.254.169.254/latest", "push target must not point at a loopback, private or link-local address"),
        ("https://100.64.0.1/hook", "push target must not point at a loopback, private or link-local address"),
        ("https://0.0.0.0/hook", "push target must not point at a loopback, private or link-local address"),
        ("https://localhost/hook", "push target must not point at a loopback, private or link-local address"),
        ("https://[::1]/hook", "push target must not point at a loopback, private or link-local address"),
        ("https://[fe80::1]/hook", "push target must not point at a loopback, private or link-local address"),
        ("https://[fd12:3456::1]/hook", "push target must not point at a loopback, private or link-local address"),
        ("https://[::ffff:127.0.0.1]/hook", "push target must not point at a loopback, private or link-local address"),
    ])
    func internalOrMalformedTargetsAreRefused(_ text: String, _ message: String) {
        #expect(throws: RelayFailure(.invalidRequest, message, topic: "push")) {
            try PushTargetPolicy.validate(text, limits: Self.production)
        }
    }

    @Test func anOversizedTargetIsRefusedWithTheLimit() {
        let text = "https://push.example.com/" + String(repeating: "a", count: 2048)
        #expect(throws: RelayFailure(.invalidRequest, "push target is longer than 2048 bytes", topic: "push")) {
            try PushTargetPolicy.validate(text, limits: Self.production)
        }
    }

    @Test func localLimitsAcceptALoopbackHTTPReceiver() throws {
        #expect(try PushTargetPolicy.validate("http://127.0.0.1:9000/hook", limits: Self.local).port == 9000)
        #expect(throws: RelayFailure.self) { try PushTargetPolicy.validate("ftp://127.0.0.1/", limits: Self.local) }
    }

    @Test func answersReadAsTheScheduleExpects() {
        #expect(WebhookDeliverer.outcome(status: 200, retryAfter: nil) == .delivered)
        #expect(WebhookDeliverer.outcome(status: 204, retryAfter: nil) == .delivered)
        #expect(WebhookDeliverer.outcome(status: 410, retryAfter: nil) == .gone)
        #expect(WebhookDeliverer.outcome(status: 404, retryAfter: nil) == .gone)
        #expect(WebhookDeliverer.outcome(status: 503, retryAfter: "7") == .failed(retryAfter: .seconds(7)))
        #expect(WebhookDeliverer.outcome(status: 429, retryAfter: "soon") == .failed(retryAfter: nil))
        #expect(WebhookDeliverer.outcome(status: 500, retryAfter: nil) == .failed(retryAfter: nil))
        #expect(WebhookDeliverer.outcome(status: 400, retryAfter: nil) == .refused)
        #expect(WebhookDeliverer.outcome(status: 301, retryAfter: nil) == .refused)
    }

    @Test func thePayloadNamesNothingOfTheEnvelope() throws {
        let payload = try JSONSerialization.jsonObject(with: PushPayload.body) as? [String: Any]
        let aps = try #require(payload?["aps"] as? [String: Any])
        #expect(Set(payload?.keys.map { $0 } ?? []) == ["aps"])
        #expect(Set(aps.keys) == ["alert", "sound", "mutable-content"])
        #expect(
            aps["alert"] as? [String: String]
                == ["title-loc-key": "RALLY_PUSH_TITLE", "loc-key": "RALLY_PUSH_BODY"])
    }
}
