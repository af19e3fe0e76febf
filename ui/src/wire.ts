// The screen's wire format between the app's frame server (crates/botdesk-rfb/src/ws.rs) and the
// viewer. Both replay the golden fixtures in crates/botdesk-rfb/wire.json (ui/tests/wire.test.ts).

/** The connection's state, as the app's session reports it. */
export type ConnState =
  | { state: "connecting" }
  | { state: "connected"; control: boolean }
  | { state: "reconnecting"; attempt: number; retry_in_ms: number; error: string }
  /** Nobody watched this screen for a while; it reconnects as soon as a viewer opens. */
  | { state: "idle" }
  | { state: "closed" };

/** One rectangle of pixels: `len` RGBA bytes from `offset` in the message. */
export interface WireRect {
  x: number;
  y: number;
  w: number;
  h: number;
  offset: number;
  len: number;
}

/** A binary message: the size frames come at (and the screen's own), or changed rectangles. */
export type Frame =
  | { kind: "size"; w: number; h: number; screen_w: number; screen_h: number }
  | { kind: "rects"; rects: WireRect[] };

/** A text message: the connection's state, or "the bot's clipboard changed". */
export type Notice = { type: "state"; state: ConnState } | { type: "clipboard" };

/** Reads a binary message (little-endian u16s); null for one it does not know or a cut one. */
export function decodeFrame(buf: ArrayBuffer): Frame | null {
  const v = new DataView(buf);
  if (v.byteLength < 1) return null;
  const u16 = (at: number) => v.getUint16(at, true);
  const kind = v.getUint8(0);
  if (kind === 2 && v.byteLength >= 9) {
    return { kind: "size", w: u16(1), h: u16(3), screen_w: u16(5), screen_h: u16(7) };
  }
  if (kind === 1 && v.byteLength >= 3) {
    const rects: WireRect[] = [];
    let off = 3;
    for (let i = 0, n = u16(1); i < n; i++) {
      if (off + 8 > v.byteLength) return null;
      const x = u16(off), y = u16(off + 2), w = u16(off + 4), h = u16(off + 6);
      const len = w * h * 4;
      off += 8;
      if (off + len > v.byteLength) return null;
      rects.push({ x, y, w, h, offset: off, len });
      off += len;
    }
    return { kind: "rects", rects };
  }
  return null;
}

/** Reads a text message; null for one it does not know. */
export function decodeNotice(text: string): Notice | null {
  let m: any;
  try {
    m = JSON.parse(text);
  } catch {
    return null;
  }
  if (m?.type === "clipboard") return { type: "clipboard" };
  if (m?.type !== "state" || typeof m.state !== "string") return null;
  const { type: _, ...state } = m;
  return { type: "state", state: state as ConnState };
}

/** What the viewer sends: the pointer (screen pixels, button mask), a key (X keysym), a full
 * refresh, or its canvas's size in device pixels. */
export const pointer = (x: number, y: number, b: number) => JSON.stringify({ t: "p", x, y, b });
export const key = (s: number, d: boolean) => JSON.stringify({ t: "k", s, d });
export const refresh = () => JSON.stringify({ t: "r" });
export const viewport = (w: number, h: number) => JSON.stringify({ t: "v", w, h });
