// The call escalation ladder (Spec/call-ladder.vectors.json), the same as
// RallyCore's CallLadder: ICE restart → offer resend → rejoin → transport
// fallback → repeat, attempt n waiting a uniform pause in
// 0 … min(30 s, 200 ms · 2^(n-1)). Pure: the caller supplies the jitter.

export const RUNGS = ["ice_restart", "offer_resend", "rejoin", "transport_fallback"];
export const BACKOFF_BASE_MS = 200;
export const BACKOFF_CAP_MS = 30000;

export function ceilingMs(attempt) {
  const doublings = Math.min(Math.max(attempt - 1, 0), 30);
  return Math.min(BACKOFF_BASE_MS * 2 ** doublings, BACKOFF_CAP_MS);
}

export class CallLadder {
  constructor(rungs = RUNGS) {
    this.rungs = rungs.length ? rungs : ["rejoin"];
    this.attempts = 0;
    this.nextRung = 0;
  }

  // The next attempt: {attempt, rung, delay_ms}; unit is a uniform draw in 0…1.
  next(unit) {
    this.attempts += 1;
    const rung = this.rungs[this.nextRung % this.rungs.length];
    this.nextRung += 1;
    const clamped = Math.min(Math.max(unit, 0), 1);
    return { attempt: this.attempts, rung, delay_ms: ceilingMs(this.attempts) * clamped };
  }

  recovered() {
    this.attempts = 0;
    this.nextRung = 0;
  }
}
