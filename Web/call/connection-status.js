// The connection-status machine (Spec/connection-status.vectors.json): the
// same table as RallyCore's ConnectionStatusMachine, event for event, so a
// browser call and an app call show the same transitions at the same
// thresholds. Pure: the caller owns the clock and the timer.

export const INDICATOR_DELAY_MS = 800;
export const RETRYING_AFTER_MS = 10000;
export const RECONNECTING_TEXT = "Reconnecting…";
export const LONGER_THAN_USUAL_TEXT = "Taking longer than usual…";

const DEGRADATIONS = new Set(["transport_error", "missed_pings", "network_change"]);

export class ConnectionStatusMachine {
  constructor(status = "idle") {
    this.status = status;
    this.recoveringSince = null;
    this.indicatorVisible = status === "retrying";
  }

  // event: "degraded" | "recovered" | "timer_fired" | "user_left" | "gone";
  // returns the effects: {schedule_timer_at_ms}, "cancel_timer", "haptic".
  handle(event, atMs, reason = "transport_error") {
    const s = this.status;
    if (event === "degraded") {
      if (!DEGRADATIONS.has(reason)) throw new Error(`unknown degradation ${reason}`);
      if (s === "idle" || s === "connected") {
        this.status = "recovering";
        this.recoveringSince = atMs;
        this.indicatorVisible = false;
        return [{ schedule_timer_at_ms: atMs + INDICATOR_DELAY_MS }];
      }
      return [];
    }
    if (event === "recovered") {
      if (s === "idle") {
        this.status = "connected";
        return [];
      }
      if (s === "recovering" || s === "retrying") {
        this.status = "connected";
        this.recoveringSince = null;
        this.indicatorVisible = false;
        return ["cancel_timer"];
      }
      return [];
    }
    if (event === "timer_fired") {
      if (s !== "recovering") return [];
      // A machine created recovering starts its clock at its first timer.
      const since = this.recoveringSince ?? atMs;
      this.recoveringSince = since;
      if (atMs - since >= RETRYING_AFTER_MS) {
        this.status = "retrying";
        this.indicatorVisible = true;
        return ["haptic"];
      }
      if (atMs - since >= INDICATOR_DELAY_MS) {
        this.indicatorVisible = true;
        return [{ schedule_timer_at_ms: since + RETRYING_AFTER_MS }];
      }
      return [{ schedule_timer_at_ms: since + INDICATOR_DELAY_MS }];
    }
    if (event === "user_left" || event === "gone") {
      if (s === "connected" || s === "recovering" || s === "retrying") {
        this.status = "idle";
        this.recoveringSince = null;
        this.indicatorVisible = false;
        return ["cancel_timer"];
      }
      return [];
    }
    throw new Error(`unknown event ${event}`);
  }

  presentation() {
    return {
      status: this.status,
      indicator_visible: this.indicatorVisible,
      text: this.indicatorVisible ? RECONNECTING_TEXT : null,
      sub_text: this.status === "retrying" ? LONGER_THAN_USUAL_TEXT : null,
      shows_leave: this.status === "retrying",
    };
  }
}
