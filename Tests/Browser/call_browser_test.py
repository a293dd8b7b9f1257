#!/usr/bin/env python3
"""End-to-end test of the browser call client (Web/call/) with real WebRTC.

Two headless Chromium instances (Selenium + chromedriver) join one call room
on a real relay; each reaches the relay through its own TCP proxy inside
this script, and the tests cut page A's proxy to play outages:

  connect          both pages reach the call and media flows (getStats bytes
                   rise on both)
  short_outage     A cut for 3 s: no badge at the cut, "Reconnecting…" after
                   800 ms, gone by itself after the restore, media flowing
  long_outage      A cut for 12 s: "Taking longer than usual…" and "Leave
                   call" after 10 s; after the restore the call recovers
  leave            A retrying (cut ≥ 10 s), "Leave call" → A is home (/call)
  room_gone        A cut, B leaves, A restored → A hears room_gone on its
                   next attempt and goes home saying why

Run (Debian: apt-get install -y chromium chromium-driver python3-selenium;
use Debian's /usr/bin/python3, which has selenium):

  /usr/bin/python3 Tests/Browser/call_browser_test.py --rally PATH/TO/rally --artifacts DIR

Prints "PASS name" or "FAIL name: reason" for each case and, last, one JSON
summary line: {"passed": [names], "failed": [names], "reasons": {name:
reason}, "seconds": {name: s}, "time_to_media_ms" (from the two pages
starting to open the link to media flowing into both), "duration_s",
"artifacts"}. Exits 0 only when every case passed. Screenshots (connected,
reconnecting, retrying, home-after-leave, home-after-room-gone, and
fail-<case>-<page> on a failure), the relay's log, chromedriver's logs and
each page's call log and console (<case>-<page>.json) go into --artifacts.

The relay serves the page's files from disk (RALLY_CALL_PAGE_DIR, default
Web/call; --web-dir to try another copy), so a page change needs no rebuild.

Real time is part of the test (the status machine's 800 ms and 10 s, a 12 s
outage), but nothing here sleeps for a race: every wait polls for a named
condition with an explicit timeout.
"""
import argparse
import base64
import json
import os
import pathlib
import queue
import re
import secrets
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import (
    JavascriptException,
    NoSuchElementException,
    StaleElementReferenceException,
    TimeoutException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
WEB_DIR = ROOT / "Web" / "call"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
POLL = 0.05  # seconds between two looks at a page

# The status machine's thresholds (Web/call/connection-status.js).
INDICATOR_DELAY_MS = 800
RETRYING_AFTER_MS = 10000
RECONNECTING = "Reconnecting…"
LONGER_THAN_USUAL = "Taking longer than usual…"

# How long the call ladder may take to try again after a restore: its pause
# is uniform in 0 … min(30 s, 200 ms · 2^(n-1)), so after a 12 s outage the
# next attempt may be up to ~26 s away.
RECOVERY_TIMEOUT = 45


class CaseFailure(Exception):
    pass


# MARK: The proxy


class Proxy:
    """A TCP proxy on a loopback port in front of the relay.

    Mode "pass" relays bytes both ways; "refuse" resets every open
    connection (RST) and resets each new one as soon as it is accepted,
    until the mode is "pass" again. One thread, one selector: a mode change
    is done on that thread and returns once it is in force."""

    def __init__(self, name, upstream_port):
        self.name = name
        self.upstream = ("127.0.0.1", upstream_port)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.mode = "pass"
        self.accepted = 0
        self.refused = 0
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, ("accept", None))
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.selector.register(self.wake_r, selectors.EVENT_READ, ("wake", None))
        self.commands = queue.Queue()
        self.peers = {}  # socket -> its other end
        self.stopped = False
        self.thread = threading.Thread(target=self._run, name=f"proxy-{name}", daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def set_mode(self, mode):
        assert mode in ("pass", "refuse"), mode
        done = threading.Event()
        self.commands.put((mode, done))
        self.wake_w.send(b"x")
        if not done.wait(5):
            raise RuntimeError(f"proxy {self.name} did not switch to {mode}")

    def stop(self):
        done = threading.Event()
        self.commands.put(("stop", done))
        try:
            self.wake_w.send(b"x")
        except OSError:
            return
        done.wait(5)

    @staticmethod
    def _reset(sock):
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        sock.close()

    def _drop(self, sock, reset):
        other = self.peers.pop(sock, None)
        for s in (sock, other):
            if s is None:
                continue
            self.peers.pop(s, None)
            try:
                self.selector.unregister(s)
            except (KeyError, ValueError):
                pass
            if reset:
                self._reset(s)
            else:
                s.close()

    def _run(self):
        while not self.stopped:
            for key, _ in self.selector.select(timeout=1):
                kind, _ = key.data
                if kind == "wake":
                    self._commands()
                elif kind == "accept":
                    self._accept()
                else:
                    self._pump(key.fileobj)
        for sock in list(self.peers):
            self._drop(sock, reset=True)
        self.selector.close()
        self.listener.close()

    def _commands(self):
        try:
            self.wake_r.recv(4096)
        except BlockingIOError:
            pass
        while True:
            try:
                command, done = self.commands.get_nowait()
            except queue.Empty:
                return
            if command == "stop":
                self.stopped = True
            else:
                self.mode = command
                if command == "refuse":
                    for sock in list(self.peers):
                        self._drop(sock, reset=True)
            done.set()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except BlockingIOError:
                return
            if self.mode == "refuse":
                self.refused += 1
                self._reset(client)
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                self._reset(client)
                continue
            self.accepted += 1
            for s in (client, upstream):
                s.setblocking(True)
                s.settimeout(5)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.peers[client] = upstream
            self.peers[upstream] = client
            self.selector.register(client, selectors.EVENT_READ, ("pump", None))
            self.selector.register(upstream, selectors.EVENT_READ, ("pump", None))

    def _pump(self, sock):
        other = self.peers.get(sock)
        if other is None:
            return
        try:
            data = sock.recv(65536)
        except OSError:
            self._drop(sock, reset=True)
            return
        if not data:
            # One side closed: close both.
            self._drop(sock, reset=False)
            return
        try:
            other.sendall(data)
        except OSError:
            self._drop(sock, reset=True)


# MARK: The relay


class Relay:
    def __init__(self, binary, artifacts, web_dir):
        self.data = tempfile.mkdtemp(prefix="rally-browser-relay-")
        self.log_path = artifacts / "relay.log"
        self.log = open(self.log_path, "w", encoding="utf-8")
        # The relay serves the page's files from disk (Web/call/), not its
        # embedded copies: no rebuild between a page change and this test.
        env = dict(os.environ, RALLY_CALL_PAGE_DIR=str(web_dir))
        self.process = subprocess.Popen(
            [binary, "relay", "--port", "0", "--data", self.data],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            text=True,
            start_new_session=True,
        )
        found = queue.Queue()

        def read():
            for line in self.process.stdout:
                self.log.write(line)
                self.log.flush()
                match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
                if match:
                    found.put(int(match.group(1)))
            found.put(None)

        threading.Thread(target=read, name="relay-log", daemon=True).start()
        try:
            self.port = found.get(timeout=30)
        except queue.Empty:
            self.port = None
        if self.port is None:
            self.stop()
            raise RuntimeError(f"the relay did not say where it listens (see {self.log_path})")

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def create_room(self):
        request = urllib.request.Request(f"{self.url}/v1/rooms", method="POST", data=b"")
        with urllib.request.urlopen(request, timeout=10) as response:
            if response.status != 201:
                raise CaseFailure(f"POST /v1/rooms answered {response.status}")
            body = json.loads(response.read())
        if not re.fullmatch(r"[0-9a-f]{32}", body.get("room", "")) or body.get("path") != f"/call/{body['room']}":
            raise CaseFailure(f"POST /v1/rooms answered an unexpected body {body}")
        return body

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        shutil.rmtree(self.data, ignore_errors=True)


def new_secret():
    """A call link's secret as call-crypto.js makes it: 32 random bytes,
    base64url without padding (43 characters)."""
    text = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")
    assert len(text) == 43
    return text


# MARK: The pages


class Page:
    """One Chromium instance and what the test reads from its page."""

    def __init__(self, name, base_url, artifacts):
        self.name = name
        self.base_url = base_url
        self.artifacts = artifacts
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in (
            "--headless=new",
            "--no-sandbox",
            "--use-fake-device-for-media-stream",
            "--use-fake-ui-for-media-stream",
            "--disable-features=WebRtcHideLocalIpsWithMdns",
            "--allow-loopback-in-peer-connection",
            "--disable-dev-shm-usage",
            "--window-size=1280,900",
            "--no-first-run",
            "--no-default-browser-check",
        ):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        log = str(artifacts / f"chromedriver-{name}.log")
        try:
            service = Service(CHROMEDRIVER, log_output=log)  # selenium ≥ 4.11
        except TypeError:
            service = Service(CHROMEDRIVER, log_path=log)
        self.driver = webdriver.Chrome(service=service, options=options)
        self.driver.set_page_load_timeout(30)
        self.driver.set_script_timeout(10)

    def open(self, path):
        self.driver.get(self.base_url + path)

    def js(self, script, *args):
        return self.driver.execute_script(script, *args)

    def state(self):
        """What the page says about itself, read in one go."""
        return self.js(
            """
            const s = window.rallyCall || null;
            const shown = (id) => {
              const e = document.getElementById(id);
              return !!e && !e.hidden && e.getClientRects().length > 0 &&
                getComputedStyle(e).display !== "none" && getComputedStyle(e).visibility !== "hidden";
            };
            const text = (id) => { const e = document.getElementById(id); return e ? e.textContent : null; };
            const remote = document.getElementById("remote");
            return {
              path: location.pathname, search: location.search, hash: location.hash,
              page: document.body ? document.body.dataset.page : null,
              phase: s && s.phase, status: s && s.status, bytes: s ? (s.bytesReceived ?? 0) : 0,
              transport: s && s.transport, error: s && s.error,
              now: performance.now(),
              badge: shown("badge"), badgeText: text("badge-text"), badgeSub: shown("badge-sub") ? text("badge-sub") : null,
              leaveLink: shown("leave-link"), phaseText: text("phase"),
              errorText: text("error"), homeNote: text("home-note"),
              remoteWidth: remote ? remote.videoWidth : null, remoteTime: remote ? remote.currentTime : null,
              callOver: !!(s && s.call && s.call.over),
              signalingUp: !!(s && s.call && s.call.signaling && s.call.signaling.up),
              // The status machine's own clock for this outage (exact; the log's times are rounded).
              recoveringSince: s && s.call && s.call.machine ? s.call.machine.recoveringSince : null,
            };
            """
        )

    def log(self):
        try:
            return self.js("return window.rallyCall ? window.rallyCall.log : null;")
        except WebDriverException:
            return None

    def wait(self, description, condition, timeout):
        """Polls condition(state) until it is true; fails naming what was
        expected and what the page showed last."""
        last = {}

        def check(_driver):
            try:
                last["state"] = self.state()
            except (JavascriptException, StaleElementReferenceException, NoSuchElementException) as error:
                last["state"] = {"unreadable": str(error).splitlines()[0]}
                return False
            return condition(last["state"]) and last["state"]

        try:
            return WebDriverWait(self.driver, timeout, poll_frequency=POLL).until(check)
        except TimeoutException:
            raise CaseFailure(
                f"page {self.name}: expected {description} within {timeout:g} s; last seen {compact(last.get('state'))}"
            ) from None

    def displayed(self, element_id):
        try:
            return self.driver.find_element(By.ID, element_id).is_displayed()
        except NoSuchElementException:
            return False

    def text(self, element_id):
        return self.driver.find_element(By.ID, element_id).text

    def screenshot(self, name):
        self.driver.save_screenshot(str(self.artifacts / name))

    def dump(self, label):
        """The page's call log and console into the artifacts."""
        try:
            console = self.driver.get_log("browser")
        except WebDriverException:
            console = []
        record = {"state": None, "log": self.log(), "console": console}
        try:
            record["state"] = self.state()
        except WebDriverException:
            pass
        (self.artifacts / f"{label}-{self.name}.json").write_text(json.dumps(record, indent=1, ensure_ascii=False))

    def quit(self):
        try:
            self.driver.quit()
        except Exception:
            pass


def compact(state):
    if not state:
        return "nothing"
    keys = ("path", "page", "phase", "status", "badge", "badgeText", "badgeSub", "leaveLink", "bytes",
            "transport", "errorText", "homeNote", "unreadable")
    return json.dumps({k: state[k] for k in keys if k in state}, ensure_ascii=False)


# MARK: Shared checks


def assert_in_call(page):
    """The visible call: phase inCall, no badge, the remote video showing
    the other camera, no error."""
    state = page.wait(
        "the connected call (phase inCall, status connected, no badge, remote video with frames)",
        lambda s: s["phase"] == "inCall" and s["status"] == "connected" and not s["badge"]
        and (s["remoteWidth"] or 0) > 0,
        30,
    )
    if page.text("phase") != "inCall":
        raise CaseFailure(f"page {page.name}: the phase shown is {page.text('phase')!r}, not inCall")
    if page.displayed("badge"):
        raise CaseFailure(f"page {page.name}: a badge is shown in a connected call")
    if not page.displayed("remote"):
        raise CaseFailure(f"page {page.name}: the remote video is not displayed")
    if page.text("error"):
        raise CaseFailure(f"page {page.name}: an error is shown: {page.text('error')!r}")
    return state


def assert_media_rising(page, timeout=15):
    """bytesReceived from getStats, read twice: the second must be larger,
    and the remote video's clock must move too."""
    first = page.state()
    page.wait(
        f"bytes received rising above {first['bytes']} and the remote video playing",
        lambda s: s["bytes"] > first["bytes"] and (s["remoteTime"] or 0) > (first["remoteTime"] or 0),
        timeout,
    )
    return first["bytes"]


def assert_home(page, note, timeout=15):
    """The home page (/call), visibly: its heading, the start button and
    the note saying why the call ended."""
    page.wait(
        f"the home page /call with the note {note!r} (and no call key left in the address)",
        lambda s: s["path"] == "/call" and s["page"] == "home" and s["homeNote"] == note and s["hash"] == "",
        timeout,
    )
    if not page.displayed("start"):
        raise CaseFailure(f"page {page.name}: home shows no 'Start a call' button")
    if page.text("home-note") != note:
        raise CaseFailure(f"page {page.name}: home says {page.text('home-note')!r}, not {note!r}")
    heading = page.driver.find_element(By.TAG_NAME, "h1")
    if not heading.is_displayed() or heading.text != "Rally call":
        raise CaseFailure(f"page {page.name}: home's heading is not shown")
    if page.displayed("badge") or page.displayed("remote"):
        raise CaseFailure(f"page {page.name}: home still shows the call")


def last_degradation(page, since_ms):
    """When the page's status machine last went from connected to
    recovering (by its log, whose times are rounded to 1 ms), at or after
    since_ms."""
    statuses = [e for e in (page.log() or []) if e["kind"] == "status"]
    for index in range(len(statuses) - 1, 0, -1):
        entry = statuses[index]
        if entry["at"] < since_ms - 1:
            break
        if entry.get("status") == "recovering" and statuses[index - 1].get("status") == "connected":
            return entry["at"]
    return None


WATCH_BADGE = """
// Every change of the badge's visibility, stamped on the page's clock when
// it happens, so the 800 ms check does not depend on how soon the test
// looks.
const badge = document.getElementById("badge");
if (window.__badgeObserver) window.__badgeObserver.disconnect();
window.__badgeChanges = [];
window.__badgeObserver = new MutationObserver(() =>
  window.__badgeChanges.push({ at: performance.now(), shown: !badge.hidden }),
);
window.__badgeObserver.observe(badge, { attributes: true, attributeFilter: ["hidden"] });
return badge.hidden;
"""


def cut_and_watch_badge(page, proxy):
    """Cuts the proxy; checks that no badge shows right at the cut (while
    the machine is recovering, under 800 ms) and that "Reconnecting…" shows
    soon after 800 ms. Returns the page-clock time of the degradation."""
    if page.js(WATCH_BADGE) is not True:
        raise CaseFailure(f"page {page.name}: the badge is shown before the cut")
    before = page.state()["now"]
    proxy.set_mode("refuse")
    # Right at the cut: the page has noticed (recovering) and shows no badge.
    early = page.wait(
        "the status machine recovering right after the cut",
        lambda s: s["status"] in ("recovering", "retrying"),
        5,
    )
    if last_degradation(page, before) is None:
        raise CaseFailure(f"page {page.name}: no connected → recovering transition in its log after the cut")
    degraded_at = early["recoveringSince"]
    if degraded_at is None or degraded_at < before:
        raise CaseFailure(f"page {page.name}: its status machine has no recovery clock from after the cut")
    if early["now"] - degraded_at < INDICATOR_DELAY_MS and early["badge"]:
        raise CaseFailure(
            f"page {page.name}: the badge showed {early['now'] - degraded_at:.0f} ms after the cut (before 800 ms)"
        )
    shown = page.wait(
        f"the {RECONNECTING!r} badge soon after 800 ms",
        lambda s: s["badge"] and s["badgeText"] == RECONNECTING,
        5,
    )
    if not page.displayed("badge") or page.text("badge-text") != RECONNECTING:
        raise CaseFailure(f"page {page.name}: the badge is not visibly {RECONNECTING!r}")
    # When it showed, by the page's own record of the DOM change (however
    # late the test looked): not before 800 ms, and not much after.
    changes = page.js("return window.__badgeChanges;") or []
    first = next((c for c in changes if c["shown"]), None)
    if first is None:
        raise CaseFailure(f"page {page.name}: the badge is shown but no change to it was recorded")
    if any(c["shown"] for c in changes if c["at"] < first["at"]):
        raise CaseFailure(f"page {page.name}: the badge flickered before it stayed")
    after = first["at"] - degraded_at
    if after < INDICATOR_DELAY_MS:
        raise CaseFailure(f"page {page.name}: the badge showed {after:.0f} ms after the degradation, before 800 ms")
    if after > INDICATOR_DELAY_MS + 2000:
        raise CaseFailure(f"page {page.name}: the badge showed only {after:.0f} ms after the degradation")
    return degraded_at


def wait_retrying(page, degraded_at, timeout=15):
    state = page.wait(
        f"{LONGER_THAN_USUAL!r} and a 'Leave call' link after 10 s",
        lambda s: s["badge"] and s["badgeSub"] == LONGER_THAN_USUAL and s["leaveLink"],
        timeout,
    )
    after = state["now"] - degraded_at
    if after < RETRYING_AFTER_MS:
        raise CaseFailure(f"page {page.name}: 'Taking longer than usual…' showed after {after:.0f} ms, before 10 s")
    if not page.displayed("leave-link") or page.text("leave-link") != "Leave call":
        raise CaseFailure(f"page {page.name}: no visible 'Leave call' link")
    if page.text("badge-sub") != LONGER_THAN_USUAL:
        raise CaseFailure(f"page {page.name}: the badge's sub text is {page.text('badge-sub')!r}")
    return state


def wait_recovered(page, timeout=RECOVERY_TIMEOUT):
    """After a restore: the badge goes away by itself and media flows."""
    page.wait(
        "the badge gone by itself and the call connected again",
        lambda s: s["phase"] == "inCall" and s["status"] == "connected" and not s["badge"] and not s["leaveLink"],
        timeout,
    )
    if page.displayed("badge"):
        raise CaseFailure(f"page {page.name}: the badge is still shown after recovering")
    assert_media_rising(page)


# MARK: The cases


class Run:
    def __init__(self, args):
        self.artifacts = pathlib.Path(args.artifacts).resolve()
        self.artifacts.mkdir(parents=True, exist_ok=True)
        self.rally = args.rally
        self.web_dir = pathlib.Path(args.web_dir).resolve()
        self.relay = None
        self.proxies = []
        self.pages = []
        self.results = []
        self.time_to_media_ms = None
        self.connected = False

    def start(self):
        self.relay = Relay(self.rally, self.artifacts, self.web_dir)
        self.proxy_a = Proxy("A", self.relay.port)
        self.proxy_b = Proxy("B", self.relay.port)
        self.proxies = [self.proxy_a, self.proxy_b]
        pages = {}

        def launch(name, proxy):
            pages[name] = Page(name, proxy.url, self.artifacts)

        threads = [threading.Thread(target=launch, args=(n, p)) for n, p in (("A", self.proxy_a), ("B", self.proxy_b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if set(pages) != {"A", "B"}:
            raise RuntimeError("a Chromium instance did not start (see chromedriver-*.log)")
        self.a, self.b = pages["A"], pages["B"]
        self.pages = [self.a, self.b]

    def stop(self):
        for page in self.pages:
            page.quit()
        for proxy in self.proxies:
            proxy.stop()
        if self.relay:
            self.relay.stop()

    def case(self, name, function, needs_connected=False):
        started = time.monotonic()
        if needs_connected and not self.connected:
            self.results.append({"name": name, "passed": False, "reason": "not run: the connect case failed"})
            print(f"FAIL {name}: not run: the connect case failed", flush=True)
            return
        try:
            function()
        except Exception as error:  # a case's failure, or an error of the test itself
            reason = str(error) if isinstance(error, CaseFailure) else f"{type(error).__name__}: {error}"
            reason = reason.replace("\n", " ")
            if not isinstance(error, CaseFailure):
                (self.artifacts / f"fail-{name}-traceback.txt").write_text(traceback.format_exc())
            for page in self.pages:
                try:
                    page.screenshot(f"fail-{name}-{page.name}.png")
                except WebDriverException:
                    pass
                page.dump(f"fail-{name}")
            for proxy in self.proxies:
                proxy.set_mode("pass")
            self.results.append({"name": name, "passed": False, "reason": reason,
                                 "seconds": round(time.monotonic() - started, 1)})
            print(f"FAIL {name}: {reason}", flush=True)
            return
        for page in self.pages:
            page.dump(name)
        self.results.append({"name": name, "passed": True, "seconds": round(time.monotonic() - started, 1)})
        print(f"PASS {name}", flush=True)

    def join_both(self):
        """A new room; both pages open its link; returns when both are in
        the call with media flowing, and how long that took."""
        room = self.relay.create_room()
        path = f"{room['path']}#{new_secret()}"
        started = time.monotonic()
        errors = []

        def open_page(page):
            try:
                page.open(path)
            except Exception as error:
                errors.append(f"page {page.name} did not open {path}: {error}")

        threads = [threading.Thread(target=open_page, args=(p,)) for p in self.pages]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise CaseFailure("; ".join(errors))
        # Media flowing into both: the first moment both pages have received bytes.
        for page in self.pages:
            page.wait("media flowing in (getStats bytesReceived > 0)", lambda s: s["bytes"] > 0, 30)
        elapsed_ms = (time.monotonic() - started) * 1000
        for page in self.pages:
            assert_in_call(page)
        return room, elapsed_ms

    # a.
    def connect(self):
        _, elapsed = self.join_both()
        self.time_to_media_ms = round(elapsed)
        for page in self.pages:
            assert_media_rising(page)
        self.a.screenshot("connected.png")
        self.b.screenshot("connected-B.png")
        self.connected = True

    # b.
    def short_outage(self):
        assert_in_call(self.a)
        degraded_at = cut_and_watch_badge(self.a, self.proxy_a)
        self.a.screenshot("reconnecting.png")
        # The cut lasts 3 s from the degradation.
        self.a.wait("3 s of outage", lambda s: s["now"] - degraded_at >= 3000, 10)
        state = self.a.state()
        if not state["badge"] or state["badgeText"] != RECONNECTING or state["leaveLink"]:
            raise CaseFailure(f"page A: during a 3 s outage expected only {RECONNECTING!r}; saw {compact(state)}")
        self.proxy_a.set_mode("pass")
        wait_recovered(self.a)
        assert_in_call(self.b)
        assert_media_rising(self.b)

    # c.
    def long_outage(self):
        assert_in_call(self.a)
        degraded_at = cut_and_watch_badge(self.a, self.proxy_a)
        wait_retrying(self.a, degraded_at)
        self.a.screenshot("retrying.png")
        self.a.wait("12 s of outage", lambda s: s["now"] - degraded_at >= 12000, 10)
        self.proxy_a.set_mode("pass")
        wait_recovered(self.a)
        assert_in_call(self.b)
        assert_media_rising(self.b)

    # d.
    def leave(self):
        self.join_both()
        degraded_at = cut_and_watch_badge(self.a, self.proxy_a)
        wait_retrying(self.a, degraded_at)
        self.a.driver.find_element(By.ID, "leave-link").click()
        assert_home(self.a, "You left the call.")
        self.a.screenshot("home-after-leave.png")
        self.proxy_a.set_mode("pass")
        # Back online, the page that left stays left: no climbing, no rejoin.
        state = self.a.state()
        if state["page"] != "home" or (state["phase"] not in ("idle", None)) or state["signalingUp"]:
            raise CaseFailure(f"page A: after leaving and the restore expected home and no signaling; saw {compact(state)}")
        # Home shown in place works as home: "Start a call" makes a room
        # and opens its link, where the page waits for the other person.
        self.a.driver.find_element(By.ID, "start").click()
        self.a.wait(
            "a new call's page /call/<room>#<secret> waiting for the other person",
            lambda s: re.fullmatch(r"/call/[0-9a-f]{32}", s["path"] or "") and len(s["hash"] or "") == 44
            and s["phase"] == "waiting" and s["page"] == "room",
            15,
        )

    # e.
    def room_gone(self):
        self.join_both()
        before = self.a.state()["now"]
        self.proxy_a.set_mode("refuse")
        self.a.wait("A's signaling down after the cut", lambda s: s["status"] in ("recovering", "retrying"), 5)
        self.b.driver.find_element(By.ID, "leave").click()
        assert_home(self.b, "You left the call.")
        self.proxy_a.set_mode("pass")
        assert_home(self.a, "The other person left the call.", timeout=RECOVERY_TIMEOUT)
        self.a.screenshot("home-after-room-gone.png")
        log = self.a.log() or []
        gone = [e for e in log if e["kind"] == "room_gone" and e["at"] >= before]
        # The log is of the new page after a navigation; the home note is the proof then.
        if gone and gone[-1].get("reason") != "peer_left":
            raise CaseFailure(f"page A: room_gone with reason {gone[-1].get('reason')!r}, not peer_left")


# Every case, in order, and whether it needs the call the one before left
# connected.
CASES = {"connect": False, "short_outage": True, "long_outage": True, "leave": False, "room_gone": False}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rally", required=True, help="the rally binary (runs `rally relay`)")
    parser.add_argument("--artifacts", default=None, help="where screenshots and logs go (default: a temporary directory)")
    parser.add_argument(
        "--only", action="append", choices=list(CASES), help="run only this case (repeatable; rally-bench call uses --only connect)"
    )
    parser.add_argument("--web-dir", default=str(WEB_DIR), help="the page's files (default: Web/call)")
    args = parser.parse_args()
    if args.artifacts is None:
        args.artifacts = tempfile.mkdtemp(prefix="rally-browser-")
    chosen = args.only or list(CASES)

    # A SIGTERM or SIGINT ends the run through the finally below, which
    # stops the browsers, the proxies and the relay.
    def interrupted(signum, _frame):
        # Once: a second signal must not cut the cleanup short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise SystemExit(f"interrupted by signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)

    started = time.monotonic()
    run = Run(args)
    setup_error = None
    try:
        run.start()
        for name in chosen:
            run.case(name, getattr(run, name), needs_connected=CASES[name])
    except BaseException as error:
        setup_error = f"{type(error).__name__}: {error}".replace("\n", " ")
        (run.artifacts / "setup-traceback.txt").write_text(traceback.format_exc())
        print(f"FAIL setup: {setup_error}", flush=True)
    finally:
        run.stop()

    passed = [r["name"] for r in run.results if r["passed"]]
    failed = [r["name"] for r in run.results if not r["passed"]] + (["setup"] if setup_error else [])
    summary = {
        # Case names, as lists (what Tests/RallyEndToEndTests/BrowserCallTests.swift reads).
        "passed": passed,
        "failed": failed,
        "reasons": {r["name"]: r["reason"] for r in run.results if not r["passed"]},
        "seconds": {r["name"]: r.get("seconds") for r in run.results},
        # From both pages starting to open the call link to media flowing into both.
        "time_to_media_ms": run.time_to_media_ms,
        "duration_s": round(time.monotonic() - started, 1),
        "artifacts": str(run.artifacts),
    }
    if setup_error:
        summary["reasons"]["setup"] = setup_error
    print(json.dumps(summary, ensure_ascii=False), flush=True)
    return 0 if not failed and len(passed) == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
