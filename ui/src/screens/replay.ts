// The replay of a run: its screen recording (or, without one, the frames the model received) on
// the run's timeline, with each action drawn where it happened, the person's turns marked, and the
// run's steps beside it, the one under the playhead highlighted. Play at 1×, 2×, 4× or 8×, skip
// idle stretches, scrub, or click a step to go there. Everything comes from the data directory
// (frames decoded by the shell): it plays with the computer stopped or Docker down.
import { api, errorMessage } from "../api";
import { button, el } from "../dom";
import type { Mark, ReplayStep, ReplayView, RunSummary } from "../types";
import { modal } from "./settings";

const SVG = "http://www.w3.org/2000/svg";
/** A mark stays drawn this long after its action (ms). */
const MARK_MS = 1500;
/** A stretch with no step longer than this is idle (ms); skipping it leaves a second each side. */
const IDLE_MS = 4000;
const BATCH = 16;
const CACHE = 256;
const SCREEN = { w: 1280, h: 800 };

function svg(tag: string, attrs: Record<string, string | number>): SVGElement {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

function size(bytes: number): string {
  return bytes >= 1e6 ? `${(bytes / 1e6).toFixed(1)} MB` : `${Math.max(1, Math.round(bytes / 1e3))} kB`;
}

function clock(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
}

/** The marks of one step, drawn on the screen's pixels. */
function drawMarks(layer: SVGElement, marks: Mark[], captions: string[]) {
  for (const m of marks) {
    switch (m.kind) {
      case "click":
        layer.append(svg("circle", { class: "click-ring", "data-x": m.x, "data-y": m.y, cx: m.x, cy: m.y, r: 20 }), svg("circle", { class: "click-dot", cx: m.x, cy: m.y, r: 4 }));
        if (m.button !== "left") captions.push(`${m.button} click`);
        break;
      case "move":
        layer.append(svg("circle", { class: "move-ring", cx: m.x, cy: m.y, r: 7 }));
        break;
      case "drag":
        layer.append(svg("line", { class: "drag-path", x1: m.x, y1: m.y, x2: m.to_x, y2: m.to_y }), svg("circle", { class: "click-ring", cx: m.to_x, cy: m.to_y, r: 14 }));
        break;
      case "type":
        captions.push(`typed: ${m.text.slice(0, 80)}`);
        break;
      case "key":
        captions.push(`${m.held ? "holds" : "keys"}: ${m.keys}`);
        break;
      case "scroll":
        if (m.x !== null && m.y !== null) layer.append(svg("circle", { class: "move-ring", cx: m.x, cy: m.y, r: 12 }));
        captions.push(`scroll ${m.direction} ${m.amount}`);
        break;
    }
  }
}

/** Opens the replay of one of the bot's runs. */
export async function openReplay(botId: string, runId: string) {
  let v: ReplayView;
  try {
    v = await api.replay(botId, runId);
  } catch (e) {
    modal("Replay", el("p", { class: "error" }, errorMessage(e)));
    return;
  }
  const start = v.run.started_at;
  const duration = Math.max(v.run.duration_ms, 1000);
  const rec = v.recording;
  const lead = rec ? rec.started_at - start : 0;
  const fps = rec?.fps ?? 4;
  const lastFrame = rec ? Math.max(0, Math.floor(((rec.ended_at - rec.started_at) / 1000) * fps) - 1) : 0;
  const rel = (s: ReplayStep) => Math.max(0, s.at - start);
  // The person's turns, [from, to) on the run's timeline: never skipped.
  const turns: [number, number][] = [];
  for (const s of v.steps) {
    if (s.kind === "takeover") turns.push([rel(s), duration]);
    if (s.kind === "handback" && turns.length) turns[turns.length - 1][1] = rel(s);
  }
  const inTurn = (t: number) => turns.some(([a, b]) => t >= a && t < b);

  const img = el("img", { class: "replay-frame", id: "replay-frame", alt: `${v.bot}'s screen` }) as HTMLImageElement;
  const layer = svg("svg", { class: "replay-marks", id: "replay-marks", viewBox: `0 0 ${SCREEN.w} ${SCREEN.h}`, preserveAspectRatio: "none" });
  const banner = el("div", { class: "replay-turn", id: "replay-turn", hidden: "" }, "The person has the screen");
  const caption = el("div", { class: "replay-caption", id: "replay-caption" });
  const stage = el("div", { class: "replay-stage" }, img, layer, banner, caption);
  const scrub = el("input", { type: "range", id: "replay-scrub", min: "0", max: String(duration), step: "50", value: "0", "aria-label": "Position in the run" }) as HTMLInputElement;
  const time = el("span", { class: "replay-time", id: "replay-time" });
  const speed = el("select", { id: "replay-speed", "aria-label": "Speed" }, ...[1, 2, 4, 8].map((n) => el("option", { value: String(n) }, `${n}×`))) as HTMLSelectElement;
  const skip = el("input", { type: "checkbox", id: "replay-skip" }) as HTMLInputElement;
  skip.checked = true;
  const play = button("▶ Play", { class: "primary small", id: "replay-play", type: "button" }, () => (playing ? pause() : resume()));
  const source = el("span", { class: "muted" }, rec ? `Recording: ${size(rec.bytes)}, ${rec.fps} frames/s${rec.capped ? ", stopped at its cap" : ""}` : "No screen recording: the frames the model received");
  const controls = el("div", { class: "replay-controls" }, play, scrub, time, speed, el("label", { class: "replay-skip" }, skip, " Skip idle"));
  const items = v.steps.map((s, i) => {
    const li = el("li", { class: `replay-step ${s.kind}`, "data-step": String(i), "data-at": String(rel(s)), title: s.text }, el("span", { class: "t" }, clock(rel(s))), " ", el("b", {}, s.title), " ", el("span", { class: "muted" }, s.text.split("\n")[0].slice(0, 90)));
    li.addEventListener("click", () => seek(rel(s)));
    return li;
  });
  const list = el("ol", { class: "replay-steps", id: "replay-steps" }, ...items);
  const box = modal(`Replay · ${v.bot} · ${v.run.task.slice(0, 60)}`, el("div", { class: "replay" }, el("div", { class: "replay-main" }, stage, controls, source), list));
  box.classList.add("replay-modal");

  let t = 0;
  let playing = false;
  let last = 0;
  let current = -1;
  const frames = new Map<number, string>();
  const shots = new Map<string, string>();
  let asking: number | null = null;

  async function fetchFrames(i: number) {
    if (!rec || asking !== null) return;
    asking = i;
    try {
      const got = await api.replayFrames(v.run.id, Math.round((i * 1000) / fps), BATCH);
      got.forEach((u, k) => frames.set(i + k, u));
      while (frames.size > CACHE) frames.delete(frames.keys().next().value as number);
    } catch (e) {
      source.textContent = errorMessage(e);
    } finally {
      asking = null;
      render();
    }
  }

  async function fetchShot(path: string) {
    if (shots.has(path)) return;
    shots.set(path, "");
    shots.set(path, await api.shot(path).catch(() => ""));
    render();
  }

  function showFrame() {
    if (rec) {
      const i = Math.min(lastFrame, Math.max(0, Math.floor(((t - lead) / 1000) * fps)));
      const url = frames.get(i);
      if (url) {
        if (img.src !== url) img.src = url;
        img.dataset.frame = String(i);
      } else fetchFrames(i);
      // The next batch before it is needed.
      if (playing && !frames.has(i + BATCH / 2) && i + BATCH / 2 <= lastFrame) fetchFrames(i + BATCH / 2);
      return;
    }
    const shown = [...v.steps].reverse().find((s) => s.image && rel(s) <= t) ?? v.steps.find((s) => s.image);
    if (!shown?.image) return;
    const url = shots.get(shown.image);
    if (url) img.src = url;
    else if (url === undefined) fetchShot(shown.image);
  }

  function render() {
    showFrame();
    layer.replaceChildren();
    const captions: string[] = [];
    for (const s of v.steps) {
      const at = rel(s);
      if (s.acted && at <= t && t - at < MARK_MS) drawMarks(layer, s.acted.marks, captions);
    }
    caption.textContent = captions.join(" · ");
    caption.hidden = captions.length === 0;
    banner.hidden = !inTurn(t);
    let now = -1;
    v.steps.forEach((s, i) => {
      if (rel(s) <= t) now = i;
    });
    if (now !== current) {
      items[current]?.classList.remove("current");
      items[now]?.classList.add("current");
      items[now]?.scrollIntoView({ block: "nearest" });
      current = now;
    }
    scrub.value = String(Math.round(t));
    time.textContent = `${clock(t)} / ${clock(duration)}`;
    time.dataset.ms = String(Math.round(t));
  }

  function seek(to: number) {
    t = Math.min(duration, Math.max(0, to));
    render();
  }

  /** The end of the idle stretch `t` is in, if skipping: a second before the next step. */
  function skipIdle(): number | null {
    if (!skip.checked || inTurn(t)) return null;
    const prev = Math.max(0, ...v.steps.map(rel).filter((a) => a <= t));
    const next = v.steps.map(rel).find((a) => a > t) ?? duration;
    return next - prev > IDLE_MS && t > prev + 1000 && t < next - 1000 ? next - 1000 : null;
  }

  function tick(now: number) {
    if (!playing || !box.isConnected || box.parentElement?.hidden) return pause();
    t += (now - last) * Number(speed.value);
    last = now;
    t = skipIdle() ?? t;
    if (t >= duration) {
      t = duration;
      render();
      return pause();
    }
    render();
    requestAnimationFrame(tick);
  }

  function resume() {
    if (t >= duration) t = 0;
    playing = true;
    play.textContent = "❚❚ Pause";
    box.dataset.playing = "true";
    last = performance.now();
    requestAnimationFrame(tick);
  }

  function pause() {
    playing = false;
    play.textContent = "▶ Play";
    box.dataset.playing = "false";
  }

  scrub.addEventListener("input", () => seek(Number(scrub.value)));
  render();
}

/** The bot's runs, newest first, each with its Replay. */
export async function openRuns(botId: string, botName: string) {
  let runs: RunSummary[];
  try {
    runs = await api.runs(botId);
  } catch (e) {
    modal(`${botName}'s runs`, el("p", { class: "error" }, errorMessage(e)));
    return;
  }
  const rows = runs.map((r) => {
    const when = new Date(r.started_at).toLocaleString();
    const recorded = r.recording_bytes !== null ? ` · recording ${size(r.recording_bytes)}` : "";
    return el(
      "li",
      { "data-run": r.id },
      el("div", { class: "model-about" }, el("strong", {}, r.task.slice(0, 80)), el("span", { class: "muted" }, ` ${when} · ${clock(r.duration_ms)} · ${r.status}${recorded}`)),
      button("Replay", { class: "small", "data-replay": r.id, type: "button" }, () => openReplay(botId, r.id)),
    );
  });
  modal(`${botName}'s runs`, rows.length ? el("ul", { class: "model-list run-list", id: "runs" }, ...rows) : el("p", { class: "muted" }, `${botName} has no runs yet.`));
}
