// One participant's signaling channel to the relay's room: JSON frames over
// a WebSocket, or (the ladder's transport fallback) over HTTP requests and
// long polls. Either way: open(token) resolves with the `joined` frame or
// rejects with {code, message} ({code: "room_gone", reason} when the room
// is gone); afterwards frames go to onFrame and a drop to onDown(reason).

export const HEARTBEAT_MS = 5000;

export class SignalingChannel {
  constructor({ room, transport, onFrame, onDown }) {
    this.room = room;
    this.transport = transport; // "ws" | "http"
    this.onFrame = onFrame;
    this.onDown = onDown;
    this.up = false;
    this.closed = false;
    this.token = null;
  }

  open(token) {
    return this.transport === "ws" ? this.#openSocket(token) : this.#openHTTP(token);
  }

  send(frame) {
    if (!this.up) return false;
    if (this.transport === "ws") {
      this.socket.send(JSON.stringify(frame));
    } else {
      fetch(`/v1/rooms/${this.room}/http`, {
        method: "POST",
        headers: { "Content-Type": "application/json", "Rally-Room-Token": this.token },
        body: JSON.stringify(frame),
      })
        .then(async (response) => {
          if (response.status === 200) this.#deliver(await response.json());
        })
        .catch(() => this.#down("transport_error"));
    }
    return true;
  }

  close() {
    this.closed = true;
    this.up = false;
    clearInterval(this.heartbeat);
    if (this.socket) this.socket.close();
    if (this.pollAbort) this.pollAbort.abort();
  }

  #down(reason) {
    if (this.closed || !this.up) return;
    this.up = false;
    clearInterval(this.heartbeat);
    if (this.socket) this.socket.close();
    if (this.pollAbort) this.pollAbort.abort();
    this.onDown(reason);
  }

  #deliver(frame) {
    this.lastHeard = performance.now();
    if (frame.type === "pong") return;
    this.onFrame(frame);
  }

  #openSocket(token) {
    return new Promise((resolve, reject) => {
      const scheme = location.protocol === "https:" ? "wss" : "ws";
      const socket = new WebSocket(`${scheme}://${location.host}/v1/rooms/${this.room}/ws`);
      this.socket = socket;
      let joined = false;
      socket.onopen = () => socket.send(JSON.stringify(token ? { type: "join", token } : { type: "join" }));
      socket.onmessage = (event) => {
        let frame;
        try {
          frame = JSON.parse(event.data);
        } catch {
          return;
        }
        if (!joined) {
          if (frame.type === "joined") {
            joined = true;
            this.up = true;
            this.token = frame.token;
            this.#startHeartbeat();
            resolve(frame);
          } else if (frame.type === "room_gone") {
            reject({ code: "room_gone", reason: frame.reason });
          } else if (frame.type === "error") {
            reject({ code: frame.code, message: frame.message });
          }
          return;
        }
        this.#deliver(frame);
      };
      socket.onclose = () => {
        if (!joined) reject({ code: "unreachable", message: "the relay could not be reached" });
        else this.#down("transport_error");
      };
    });
  }

  // A ping every HEARTBEAT_MS; nothing heard for two of them is a drop
  // (a stalled path sends no close).
  #startHeartbeat() {
    this.lastHeard = performance.now();
    clearInterval(this.heartbeat);
    this.heartbeat = setInterval(() => {
      if (performance.now() - this.lastHeard > 2 * HEARTBEAT_MS) {
        this.#down("missed_pings");
        return;
      }
      if (this.transport === "ws" && this.socket.readyState === WebSocket.OPEN) {
        this.socket.send('{"type":"ping"}');
      }
    }, HEARTBEAT_MS);
  }

  async #openHTTP(token) {
    let response;
    try {
      response = await fetch(`/v1/rooms/${this.room}/http`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(token ? { type: "join", token } : { type: "join" }),
      });
    } catch {
      throw { code: "unreachable", message: "the relay could not be reached" };
    }
    const frame = await response.json().catch(() => ({ type: "error", code: "malformed_frame" }));
    if (frame.type === "room_gone") throw { code: "room_gone", reason: frame.reason };
    if (frame.type !== "joined") throw { code: frame.code, message: frame.message };
    this.up = true;
    this.token = frame.token;
    this.#startHeartbeat();
    this.#poll(0);
    return frame;
  }

  async #poll(after) {
    while (this.up && !this.closed) {
      this.pollAbort = new AbortController();
      let response;
      try {
        response = await fetch(`/v1/rooms/${this.room}/http?after=${after}`, {
          headers: { "Rally-Room-Token": this.token },
          signal: this.pollAbort.signal,
        });
      } catch {
        this.#down("transport_error");
        return;
      }
      if (response.status !== 200) {
        const text = await response.text().catch(() => "");
        const frame = text ? JSON.parse(text) : null;
        if (frame && frame.type === "room_gone") this.#deliver(frame);
        this.#down("transport_error");
        return;
      }
      this.lastHeard = performance.now();
      after = Number(response.headers.get("Rally-Last-Seq") ?? after);
      const body = await response.text();
      for (const line of body.split("\n")) {
        if (line) this.#deliver(JSON.parse(line));
      }
    }
  }
}
