// A bot's screen in the webview: pixels arrive from the Rust session over a loopback WebSocket as
// dirty rectangles and are drawn on a canvas scaled to fit; input is mapped back to exact
// framebuffer coordinates and sent only while the person holds control.
import { keysymOf } from "./keysym";
import { type ConnState, decodeFrame, decodeNotice, key, pointer, viewport } from "./wire";

export type { ConnState };

/** Counters the app tests and benchmarks read (window.__botdesk). */
/** A clipboard change this soon after the person's Ctrl+C on a bot's screen is theirs to take. */
const COPY_WINDOW_MS = 3000;

export const stats = { framesDrawn: 0, rectsDrawn: 0, screensDrawn: 0, lastDrawAt: 0 };
(window as any).__botdesk = { stats, viewers: [] as Viewer[] };

export class Viewer {
  readonly el: HTMLElement;
  readonly canvas: HTMLCanvasElement;
  private ctx: CanvasRenderingContext2D;
  private overlay: HTMLElement;
  private ws: WebSocket | null = null;
  private closed = false;
  /** A hidden viewer lets its socket and its pixels go; the app keeps the session a couple of
   * seconds (shown again within them, the current picture comes at once), then lets the
   * connection and its pixels go too and reconnects when the screen is shown again. */
  private hidden = false;
  private buttons = 0;
  /** The bot's screen size (pointer coordinates); the canvas holds it scaled to fit. */
  screenW = 1280;
  screenH = 800;
  /** Actual size: one screen pixel on one device pixel, the viewer scrolling when it is larger. */
  private actual = false;
  private sentViewport = "";
  private pressed = new Map<string, number>();
  state: ConnState = { state: "connecting" };
  onState: (s: ConnState) => void = () => {};
  /** Gives the bot the person's clipboard text (RFB's cut text is Latin-1: the app does it). */
  onSendClipboard: (text: string) => Promise<void> = async () => {};
  /** The bot's clipboard changed while the person has control; `asked`: they pressed Ctrl+C
   *  (or Ctrl+X) on its screen just before, so it goes to theirs. Otherwise it waits for them. */
  onBotClipboard: (asked: boolean) => void = () => {};
  /** The bot's clipboard has text the person has not taken (the screen bar's Copy button). */
  botClipboardWaiting = false;
  /** When the person last pressed a copy key on this screen. */
  private copyKeyAt = 0;

  constructor(private url: string, readonly bot: string, private interactive: boolean) {
    this.canvas = document.createElement("canvas");
    this.canvas.className = "screen";
    // No pixels until the first frame says its size (the app sends it at the size this canvas
    // shows, known once the tab is laid out).
    this.canvas.width = this.canvas.height = 1;
    this.canvas.dataset.bot = bot;
    this.ctx = this.canvas.getContext("2d", { alpha: false })!;
    this.overlay = document.createElement("div");
    this.overlay.className = "screen-overlay";
    this.el = document.createElement("div");
    this.el.className = "viewer" + (interactive ? " interactive" : "");
    this.el.append(this.canvas, this.overlay);
    new ResizeObserver(() => this.fit()).observe(this.el);
    if (interactive) this.bindInput();
    (window as any).__botdesk.viewers.push(this);
    this.connect();
    this.render();
  }

  get control(): boolean {
    return this.state.state === "connected" && this.state.control;
  }

  setVisible(visible: boolean) {
    if (visible === !this.hidden) return;
    this.hidden = !visible;
    if (this.hidden) {
      this.ws?.close();
      this.ws = null;
      this.canvas.width = this.canvas.height = 1; // frees the backing store
    } else {
      this.connect();
    }
  }

  get actualSize(): boolean {
    return this.actual;
  }

  /** Between fit-to-window and actual size; frames then come at the size drawn. */
  setActualSize(on: boolean) {
    this.actual = on;
    this.el.classList.toggle("actual", on);
    this.fit();
  }

  close() {
    this.closed = true;
    this.ws?.close();
    const all = (window as any).__botdesk.viewers as Viewer[];
    all.splice(all.indexOf(this), 1);
  }

  /** Connects once the canvas's size on screen is known, so the first frame already comes at it. */
  private connect() {
    if (this.closed || this.hidden) return;
    const vp = this.layout();
    if (!vp) return; // fit() connects once the tab is laid out
    this.sentViewport = JSON.stringify(vp);
    const ws = new WebSocket(`${this.url}&w=${vp.w}&h=${vp.h}`);
    ws.binaryType = "arraybuffer";
    ws.onopen = () => this.fit();
    ws.onmessage = (m) => (typeof m.data === "string" ? this.onText(m.data) : this.onBinary(m.data as ArrayBuffer));
    // The app-side session reconnects to the computer by itself; this socket only drops when
    // the app's transport does, so try again shortly.
    ws.onclose = () => {
      if (this.closed || this.hidden || this.ws !== ws) return;
      this.setState({ state: "reconnecting", attempt: 1, retry_in_ms: 500, error: "the screen transport closed" });
      setTimeout(() => this.connect(), 500);
    };
    this.ws = ws;
  }

  private onText(text: string) {
    const m = decodeNotice(text);
    if (m?.type === "state") this.setState(m.state);
    else if (m?.type === "clipboard" && this.control) this.onBotClipboard(Date.now() - this.copyKeyAt < COPY_WINDOW_MS);
  }

  private onBinary(buf: ArrayBuffer) {
    const f = decodeFrame(buf);
    if (f?.kind === "size") {
      if (f.screen_w && f.screen_h && (f.screen_w !== this.screenW || f.screen_h !== this.screenH)) {
        this.screenW = f.screen_w;
        this.screenH = f.screen_h;
        this.fit();
      }
      if (f.w && f.h && (f.w !== this.canvas.width || f.h !== this.canvas.height)) {
        this.canvas.width = f.w;
        this.canvas.height = f.h;
      }
    } else if (f?.kind === "rects") {
      for (const r of f.rects) {
        if (r.w && r.h) this.ctx.putImageData(new ImageData(new Uint8ClampedArray(buf, r.offset, r.len), r.w, r.h), r.x, r.y);
        stats.rectsDrawn++;
        stats.screensDrawn += (r.w * r.h) / (this.canvas.width * this.canvas.height); // whole screens' worth
      }
      stats.framesDrawn++;
      stats.lastDrawAt = performance.now();
    }
  }

  private setState(s: ConnState) {
    this.state = s;
    this.render();
    this.onState(s);
  }

  private render() {
    const s = this.state;
    this.el.dataset.state = s.state;
    this.el.dataset.control = String(this.control);
    let text = "";
    if (s.state === "connecting" || s.state === "idle") text = "Connecting…";
    else if (s.state === "reconnecting") text = `Reconnecting… (${s.error})`;
    else if (s.state === "closed") text = "Screen closed";
    this.overlay.textContent = text;
    this.overlay.hidden = !text;
    this.canvas.tabIndex = this.interactive ? 0 : -1;
  }

  /** Scale to fit, keeping the aspect ratio; the app then sends frames at that size (device
   * pixels), so the webview never scales or carries more pixels than it shows. The canvas sits on
   * whole device pixels too: off by a fraction, the webview may resample every frame as it paints. */
  private fit() {
    const vp = this.layout();
    if (!vp) return;
    if (!this.ws) return this.connect(); // not connected yet: it waited for a size
    const msg = JSON.stringify(vp);
    if (msg !== this.sentViewport && this.ws?.readyState === WebSocket.OPEN) {
      this.sentViewport = msg;
      this.ws.send(viewport(vp.w, vp.h));
    }
  }

  /** Sizes and places the canvas; its size in device pixels, or null before layout. */
  private layout(): { w: number; h: number } | null {
    const r = this.el.getBoundingClientRect();
    if (!r.width || !r.height) return null;
    const dpr = devicePixelRatio || 1;
    const s = this.actual ? 1 / dpr : Math.min(r.width / this.screenW, r.height / this.screenH);
    const w = Math.max(1, Math.floor(this.screenW * s * dpr)), h = Math.max(1, Math.floor(this.screenH * s * dpr));
    // Centred when it fits; at actual size, larger than the viewer, it starts at the top left
    // and the viewer scrolls.
    const snap = (start: number, free: number) => (free < 0 ? 0 : Math.round((start + free / 2) * dpr) / dpr - start);
    Object.assign(this.canvas.style, {
      width: `${w / dpr}px`,
      height: `${h / dpr}px`,
      left: `${snap(r.left, r.width - w / dpr)}px`,
      top: `${snap(r.top, r.height - h / dpr)}px`,
    });
    return { w, h };
  }

  private send(msg: string) {
    if (this.control && this.ws?.readyState === WebSocket.OPEN) this.ws.send(msg);
  }

  /** Exact mapping from the scaled canvas back to framebuffer pixels. */
  private at(e: MouseEvent): [number, number] {
    const r = this.canvas.getBoundingClientRect();
    const x = ((e.clientX - r.left) / r.width) * this.screenW;
    const y = ((e.clientY - r.top) / r.height) * this.screenH;
    return [Math.max(0, Math.min(this.screenW - 1, Math.floor(x))), Math.max(0, Math.min(this.screenH - 1, Math.floor(y)))];
  }

  private bindInput() {
    const c = this.canvas;
    const mask = (b: number) => (b === 0 ? 1 : b === 1 ? 2 : b === 2 ? 4 : 0);
    c.addEventListener("mousemove", (e) => {
      const [x, y] = this.at(e);
      this.send(pointer(x, y, this.buttons));
    });
    c.addEventListener("mousedown", (e) => {
      c.focus();
      this.buttons |= mask(e.button);
      const [x, y] = this.at(e);
      this.send(pointer(x, y, this.buttons));
      e.preventDefault();
    });
    c.addEventListener("mouseup", (e) => {
      this.buttons &= ~mask(e.button);
      const [x, y] = this.at(e);
      this.send(pointer(x, y, this.buttons));
    });
    c.addEventListener("contextmenu", (e) => e.preventDefault());
    c.addEventListener(
      "wheel",
      (e) => {
        const [x, y] = this.at(e);
        const bit = e.deltaY < 0 ? 8 : e.deltaY > 0 ? 16 : e.deltaX < 0 ? 32 : 64;
        this.send(pointer(x, y, this.buttons | bit));
        this.send(pointer(x, y, this.buttons));
        e.preventDefault();
      },
      { passive: false },
    );
    c.addEventListener("keydown", (e) => {
      if (!this.control) return;
      // Ctrl+V: the person's clipboard goes to the bot first, then the keystroke itself.
      const s = keysymOf(e);
      if (s === null) return;
      e.preventDefault();
      this.pressed.set(e.code || e.key, s);
      if ((e.ctrlKey || e.metaKey) && ["c", "x"].includes(e.key.toLowerCase())) this.copyKeyAt = Date.now();
      if ((e.ctrlKey || e.metaKey) && e.key.toLowerCase() === "v" && navigator.clipboard?.readText) {
        navigator.clipboard
          .readText()
          .then((text) => (text ? this.sendClipboard(text) : undefined))
          .catch(() => {})
          .finally(() => this.send(key(s, true)));
        return;
      }
      this.send(key(s, true));
    });
    c.addEventListener("keyup", (e) => {
      const s = this.pressed.get(e.code || e.key) ?? keysymOf(e);
      this.pressed.delete(e.code || e.key);
      if (s === null) return;
      e.preventDefault();
      this.send(key(s, false));
    });
    c.addEventListener("blur", () => {
      for (const s of this.pressed.values()) this.send(key(s, false));
      this.pressed.clear();
    });
  }

  /** Sends the person's clipboard text to the bot's clipboard (only in control). */
  sendClipboard(text: string): Promise<void> {
    return this.control ? this.onSendClipboard(text) : Promise.resolve();
  }
}
