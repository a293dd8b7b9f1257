// The browser call client: the call phases of the connection-status seed
// (idle | creatingRoom | joining | waiting | inCall | ending | error), the
// status machine active only while inCall, and the call ladder while the
// call is not connected. Media is the browser's own WebRTC.

import { ConnectionStatusMachine } from "./connection-status.js";
import { CallLadder } from "./call-ladder.js";
import { newSecret, parseSecret, signalKey, seal, open } from "./call-crypto.js";
import { SignalingChannel } from "./signaling.js";

const $ = (id) => document.getElementById(id);
const now = () => performance.now();

// What tests and curious people can read: window.rallyCall.
const state = {
  phase: "idle",
  status: "idle",
  presentation: null,
  log: [],
  error: null,
  rungs: [],
  transport: "ws",
};
window.rallyCall = state;

function record(kind, detail = {}) {
  state.log.push({ at: Math.round(now()), kind, ...detail });
}

function setPhase(phase) {
  state.phase = phase;
  record("phase", { phase });
  $("phase").textContent = phase;
  document.body.dataset.phase = phase;
}

// MARK: Home

async function startCall() {
  setPhase("creatingRoom");
  try {
    const response = await fetch("/v1/rooms", { method: "POST" });
    const body = await response.json();
    if (response.status !== 201) throw new Error(body.message ?? "the relay refused to make a room");
    location.assign(`/call/${body.room}#${newSecret()}`);
  } catch (error) {
    setPhase("error");
    $("home-error").textContent = `Could not start a call: ${error.message}`;
  }
}

const HOME_NOTES = {
  left: "You left the call.",
  ended: "The call has ended.",
  expired: "The call expired.",
  peer_left: "The other person left the call.",
};

// Home, in this document: the page carries home's view, so leaving works
// while the relay is out of reach (a navigation to /call would land on the
// browser's error page). The address becomes home's, which also takes the
// call's key out of this history entry.
function goHome(reason) {
  history.replaceState(null, "", reason ? `/call?left=${encodeURIComponent(reason)}` : "/call");
  showHome();
}

function showHome() {
  document.body.dataset.page = "home";
  $("room-view").hidden = true;
  $("home-view").hidden = false;
  const left = new URLSearchParams(location.search).get("left");
  $("home-note").textContent = left ? (HOME_NOTES[left] ?? "The call is over.") : "";
  const start = $("start");
  if (!start.dataset.bound) {
    start.dataset.bound = "yes";
    start.addEventListener("click", startCall);
  }
}

// MARK: The call

class Call {
  constructor(room, secret) {
    this.room = room;
    this.secret = secret;
    this.machine = new ConnectionStatusMachine();
    this.ladder = new CallLadder();
    this.transport = "ws";
    this.me = null;
    this.peer = null;
    this.mediaUp = false;
    this.statusTimer = null;
    this.ladderTimer = null;
    this.climbing = false;
    this.over = false;
  }

  get offerer() {
    return this.me && this.peer && this.me < this.peer;
  }

  async start() {
    setPhase("joining");
    this.key = await signalKey(this.secret);
    let stream;
    try {
      stream = await navigator.mediaDevices.getUserMedia({ audio: true, video: true });
    } catch (error) {
      if (this.over) return;
      return this.fail(`Camera and microphone are needed for a call (${error.name}).`);
    }
    if (this.over) {
      // Left while the browser was asking for the camera: let it go.
      for (const track of stream.getTracks()) track.stop();
      return;
    }
    this.stream = stream;
    $("local").srcObject = stream;
    this.makePeerConnection();
    try {
      await this.openSignaling(null);
    } catch (error) {
      if (this.over) return;
      return this.refused(error);
    }
  }

  fail(message) {
    state.error = message;
    $("error").textContent = message;
    setPhase("error");
  }

  refused(error) {
    if (error.code === "room_gone") return this.roomGone(error.reason);
    const messages = {
      room_not_found: "This call does not exist. Check the link, or start a new call.",
      room_full: "This call already has two people in it.",
      unreachable: "The relay could not be reached. Check your connection and try again.",
    };
    this.fail(messages[error.code] ?? error.message ?? "The call could not be joined.");
  }

  makePeerConnection() {
    const pc = new RTCPeerConnection({ iceServers: [] });
    this.pc = pc;
    for (const track of this.stream.getTracks()) pc.addTrack(track, this.stream);
    pc.ontrack = (event) => {
      $("remote").srcObject = event.streams[0];
    };
    pc.onicecandidate = (event) => {
      if (event.candidate) this.sendSignal({ kind: "candidate", candidate: event.candidate.toJSON() });
    };
    pc.oniceconnectionstatechange = () => {
      const ice = pc.iceConnectionState;
      record("ice", { ice });
      if (ice === "connected" || ice === "completed") {
        this.mediaUp = true;
        if (state.phase === "joining" || state.phase === "waiting") this.enterCall();
        else this.maybeRecovered();
      } else if (ice === "disconnected" || ice === "failed") {
        this.mediaUp = false;
        this.degraded("transport_error");
      }
    };
  }

  async openSignaling(token) {
    if (this.signaling) this.signaling.close();
    const channel = new SignalingChannel({
      room: this.room,
      transport: this.transport,
      onFrame: (frame) => this.onFrame(frame),
      onDown: (reason) => {
        record("signaling_down", { reason });
        this.degraded(reason);
      },
    });
    this.signaling = channel;
    state.transport = this.transport;
    const joined = await channel.open(token ?? this.token ?? null);
    if (this.over || this.signaling !== channel) {
      // The call ended (or a newer channel replaced this one) while this
      // join was on its way: give the place back to nobody, quietly.
      channel.close();
      throw { code: "superseded", message: "the call is over" };
    }
    this.me = joined.participant;
    this.token = joined.token;
    record("joined", { participant: joined.participant, transport: this.transport });
    const present = joined.peers.find((peer) => peer.state !== "gone");
    if (present) this.peer = present.participant;
    if (state.phase === "joining") {
      if (this.peer) this.negotiate(false);
      else setPhase("waiting");
    }
    this.maybeRecovered();
    return joined;
  }

  async sendSignal(payload) {
    if (!this.peer || !this.signaling || !this.signaling.up) return false;
    const data = await seal(this.key, this.room, payload);
    return this.signaling.send({ type: "signal", to: this.peer, data });
  }

  async negotiate(iceRestart) {
    if (!this.offerer) {
      if (iceRestart) await this.sendSignal({ kind: "restart" });
      return;
    }
    const offer = await this.pc.createOffer({ iceRestart });
    await this.pc.setLocalDescription(offer);
    await this.sendSignal({ kind: "offer", sdp: offer.sdp });
  }

  async onFrame(frame) {
    if (this.over) return;
    switch (frame.type) {
      case "peer":
        record("peer", { participant: frame.participant, state: frame.state });
        if (frame.state === "joined" && this.peer !== frame.participant) {
          this.peer = frame.participant;
          if (state.phase === "waiting" || state.phase === "joining") await this.negotiate(false);
        } else if (frame.state === "joined" && state.phase === "inCall" && !this.mediaUp) {
          await this.negotiate(true);
        }
        break;
      case "signal":
        await this.onSignal(frame);
        break;
      case "room_gone":
        this.roomGone(frame.reason);
        break;
      case "error":
        record("relay_error", { code: frame.code });
        break;
    }
  }

  async onSignal(frame) {
    let payload;
    try {
      payload = await open(this.key, this.room, frame.data);
    } catch {
      record("unreadable_signal");
      return;
    }
    this.peer = frame.from;
    const pc = this.pc;
    if (payload.kind === "offer") {
      await pc.setRemoteDescription({ type: "offer", sdp: payload.sdp });
      const answer = await pc.createAnswer();
      await pc.setLocalDescription(answer);
      await this.sendSignal({ kind: "answer", sdp: answer.sdp });
    } else if (payload.kind === "answer") {
      if (pc.signalingState === "have-local-offer") await pc.setRemoteDescription({ type: "answer", sdp: payload.sdp });
    } else if (payload.kind === "candidate") {
      try {
        await pc.addIceCandidate(payload.candidate);
      } catch {
        record("candidate_refused");
      }
    } else if (payload.kind === "restart") {
      if (this.offerer) await this.negotiate(true);
    }
  }

  enterCall() {
    setPhase("inCall");
    // Joining resets the status to connected.
    this.machine = new ConnectionStatusMachine("connected");
    this.ladder.recovered();
    this.render();
    this.statsTimer = setInterval(() => this.sampleStats(), 500);
  }

  degraded(reason) {
    if (this.over) return;
    if (state.phase === "inCall") {
      this.apply(this.machine.handle("degraded", now(), reason));
      this.climb();
    } else if (state.phase === "joining" || state.phase === "waiting") {
      // Before the call the status machine stays out of it: keep the
      // place by rejoining with the ladder's pauses.
      this.climb();
    }
  }

  maybeRecovered() {
    if (state.phase !== "inCall" || !this.mediaUp || !this.signaling || !this.signaling.up) return;
    if (this.machine.status === "connected") return;
    this.apply(this.machine.handle("recovered", now()));
    this.ladder.recovered();
    clearTimeout(this.ladderTimer);
    this.climbing = false;
  }

  apply(effects) {
    for (const effect of effects) {
      if (effect === "cancel_timer") clearTimeout(this.statusTimer);
      else if (effect === "haptic") record("haptic");
      else if (effect.schedule_timer_at_ms !== undefined) {
        clearTimeout(this.statusTimer);
        // Rounded up: setTimeout drops the fraction of a millisecond, and a
        // timer fired a hair early is only scheduled again (and again).
        this.statusTimer = setTimeout(
          () => this.apply(this.machine.handle("timer_fired", now())),
          Math.max(0, Math.ceil(effect.schedule_timer_at_ms - now())),
        );
      }
    }
    this.render();
  }

  // The ladder: each step after its pause, until recovered, the room is
  // gone or the user leaves.
  climb() {
    if (this.climbing || this.over) return;
    this.climbing = true;
    const step = this.ladder.next(Math.random());
    this.ladderTimer = setTimeout(() => this.tryRung(step), step.delay_ms);
  }

  async tryRung(step) {
    if (this.over) return;
    state.rungs.push(step.rung);
    record("rung", { rung: step.rung, attempt: step.attempt, delay_ms: Math.round(step.delay_ms) });
    try {
      switch (step.rung) {
        case "ice_restart":
          await this.ensureSignaling();
          await this.negotiate(true);
          break;
        case "offer_resend":
          await this.ensureSignaling();
          if (this.offerer && this.pc.localDescription) {
            await this.sendSignal({ kind: "offer", sdp: this.pc.localDescription.sdp });
          } else await this.negotiate(true);
          break;
        case "rejoin":
          this.transport = "ws";
          await this.openSignaling(this.token);
          await this.negotiate(true);
          break;
        case "transport_fallback":
          this.transport = "http";
          await this.openSignaling(this.token);
          await this.negotiate(true);
          break;
      }
    } catch (error) {
      if (error && error.code === "room_gone") return this.roomGone(error.reason);
      record("rung_failed", { rung: step.rung, code: error?.code ?? String(error) });
    }
    this.climbing = false;
    if (this.over) return;
    const recovered =
      state.phase === "inCall" ? this.machine.status === "connected" : this.signaling && this.signaling.up;
    if (!recovered) this.climb();
  }

  async ensureSignaling() {
    if (!this.signaling || !this.signaling.up) await this.openSignaling(this.token);
  }

  roomGone(reason) {
    record("room_gone", { reason });
    this.end(reason);
  }

  leave() {
    if (this.signaling && this.signaling.up) this.signaling.send({ type: "leave" });
    this.end("left");
  }

  end(reason) {
    if (this.over) return;
    this.over = true;
    setPhase("ending");
    this.apply(this.machine.handle(reason === "left" ? "user_left" : "gone", now()));
    clearTimeout(this.ladderTimer);
    clearInterval(this.statsTimer);
    // Let a leave frame go out before the socket closes.
    setTimeout(() => {
      if (this.signaling) this.signaling.close();
      if (this.pc) this.pc.close();
      if (this.stream) for (const track of this.stream.getTracks()) track.stop();
      $("local").srcObject = null;
      $("remote").srcObject = null;
      setPhase("idle");
      goHome(reason);
    }, 100);
  }

  async sampleStats() {
    if (!this.pc) return;
    const stats = await this.pc.getStats();
    let bytes = 0;
    stats.forEach((report) => {
      if (report.type === "inbound-rtp") bytes += report.bytesReceived ?? 0;
    });
    state.bytesReceived = bytes;
  }

  render() {
    const p = this.machine.presentation();
    state.status = p.status;
    state.presentation = p;
    record("status", { status: p.status, text: p.text, sub_text: p.sub_text });
    $("badge").hidden = !p.indicator_visible;
    $("badge-text").textContent = p.text ?? "";
    $("badge-sub").textContent = p.sub_text ?? "";
    $("badge-sub").hidden = !p.sub_text;
    $("leave-link").hidden = !p.shows_leave;
  }
}

// MARK: Start

const match = location.pathname.match(/^\/call\/([0-9a-f]{32})$/);
if (match) {
  document.body.dataset.page = "room";
  $("room-view").hidden = false;
  const secret = parseSecret(location.hash);
  if (!secret) {
    $("error").textContent = "This call link is incomplete: its key (the part after #) is missing or damaged.";
    setPhase("error");
  } else {
    const call = new Call(match[1], secret);
    state.call = call;
    $("leave").addEventListener("click", () => call.leave());
    $("leave-link").addEventListener("click", (event) => {
      event.preventDefault();
      call.leave();
    });
    call.start();
  }
} else {
  showHome();
}
