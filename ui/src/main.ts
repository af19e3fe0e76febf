import { api, BotSpend, BotStatus, BotView, BuildProgress, ChatCall, ChatItem, DoctorReport, errorCode, errorMessage, Limits, ModelView, Prices, RunEvent, RunFailure, Scope, usageText } from "./api";
import { button, el } from "./dom";
import { activityPane, browserPane, filesPane, onActivity, onFilesChanged } from "./panes";
import { Viewer } from "./viewer";

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;

/** The bot's clipboard text last put on the person's (the app tests read it). */
const clipboardFromBot = { last: null as string | null };
(window as any).__botdesk.clipboard = clipboardFromBot;

/** A window of its own showing one bot's screen (`index.html?screen=BOT_ID`), or null. */
const SOLO = new URLSearchParams(location.search).get("screen");

type Dock = "terminal" | "files" | "browser";

const state = {
  bots: [] as BotView[],
  selected: null as string | null,
  health: null as DoctorReport | null,
  /** Bots whose screen has a tab, in opening order. */
  tabs: [] as string[],
  activeTab: "overview" as string,
  dock: null as Dock | null,
  /** The last refusal of Take control (shown with a Stop button). */
  controlError: null as { bot: string; message: string; code: string | null } | null,
  /** What the last move between the Team computer and a Private one did, or "moving" meanwhile. */
  switched: null as { bot: string; text: string } | null,
  busy: false,
  /** Chat per bot id (loaded when first shown), streamed text of the running reply, send errors. */
  chats: new Map<string, ChatItem[]>(),
  live: new Map<string, string>(),
  sendError: new Map<string, string>(),
  drafts: new Map<string, string>(),
  /** Bots the person asked to pause, until their Take control returns (shows "Pausing…" at once). */
  pausing: new Set<string>(),
  /** Focus mode: the active screen tab alone, as large as the window allows (Esc returns). */
  focus: false,
  /** The note being typed for the bot at handback, per bot. */
  notes: new Map<string, string>(),
  /** What each bot's runs have cost so far (loaded with its chat, again when a run ends). */
  spend: new Map<string, BotSpend>(),
};

/** Screenshot data URLs by path (they never change). */
const shots = new Map<string, string>();

/** Live viewers: the tab's (interactive) and the overview's (small, view only), per bot. */
const viewers = new Map<string, Viewer>();
const thumbs = new Map<string, Viewer>();
const urls = new Map<string, string>();

function initials(name: string): string {
  return name
    .split(/[\s._-]+/)
    .filter(Boolean)
    .slice(0, 2)
    .map((w) => w[0]!.toUpperCase())
    .join("");
}

const STATUS: Record<BotStatus, string> = {
  idle: "Idle",
  running: "Running",
  pausing: "Pausing…",
  waiting_for_you: "Waiting for you",
  you_have_control: "You have control",
  error: "Error",
};

const bot = (id: string | null) => state.bots.find((b) => b.id === id);

// ---------------------------------------------------------------------------------------------
// Sidebar

function renderBots() {
  const list = $("bot-list");
  list.replaceChildren();
  if (state.bots.length === 0) list.append(el("li", { class: "empty" }, "No bots yet. Press + to create one."));
  for (const b of state.bots) {
    const item = el(
      "li",
      { class: "bot" + (b.id === state.selected ? " selected" : ""), "data-bot": b.id, "data-status": b.status, tabindex: "0" },
      el("span", { class: "avatar" }, initials(b.name)),
      el("span", { class: "bot-text" }, el("span", { class: "bot-name" }, b.name), el("span", { class: "bot-sub" }, STATUS[b.status])),
      el("span", { class: `status ${b.status}`, title: STATUS[b.status] }),
    );
    item.addEventListener("click", () => select(b.id));
    item.addEventListener("keydown", (e) => (e as KeyboardEvent).key === "Enter" && select(b.id));
    list.append(item);
  }
}

function renderHealth() {
  const footer = $("health");
  const report = state.health;
  if (!report) {
    footer.replaceChildren(el("span", { class: "muted" }, "Checking Docker…"));
    return;
  }
  const names: Record<string, string> = { docker: "Docker", image: "Computer image", image_age: "Image freshness", keyring: "Keyring" };
  footer.replaceChildren(
    ...report.checks
      .filter((c) => c.name in names)
      .map((c) => {
        const check = el(
          "div",
          { class: "check " + (!c.ok ? "bad" : c.warn ? "warn" : "ok"), title: c.fix ? `${c.detail}\nFix: ${c.fix}` : c.detail },
          el("span", { class: "dot" }),
          names[c.name]!,
        );
        // What needs seeing to opens the set-up steps.
        if (!c.ok || c.warn) check.addEventListener("click", () => firstRun(report));
        return check;
      }),
  );
}

// ---------------------------------------------------------------------------------------------
// The selected bot: header, chat, computer area, dock

function renderMain() {
  const main = $("main");
  const b = bot(state.selected);
  if (!b) {
    main.replaceChildren(
      el(
        "div",
        { class: "empty-state" },
        el("h1", {}, state.bots.length ? "Pick a bot" : "Welcome to Botdesk"),
        el(
          "p",
          {},
          state.bots.length
            ? "Choose a bot on the left to see its chat, its screen and its files."
            : "Each bot gets its own Linux desktop, browser and workspace folder on this laptop. Create your first bot with the + button.",
        ),
      ),
    );
    return;
  }
  // Re-rendering moves the live viewer into the new layout; keep the keyboard where it was.
  const focused = document.activeElement;
  const onScreen = state.activeTab !== "overview" && viewers.has(state.activeTab);
  if (!onScreen) state.focus = false;
  $("app").classList.toggle("focus", state.focus);
  if (SOLO) main.replaceChildren(soloBar(b), controlNotice(b), soloScreen(b));
  else main.replaceChildren(header(b), controlNotice(b), el("div", { class: "workspace" }, chat(b), computer()), dock(b));
  if (focused instanceof HTMLElement && focused !== document.activeElement && focused.isConnected) focused.focus();
  // A field drawn anew (the note for the bot) keeps the keyboard too.
  const again = focused instanceof HTMLInputElement && !focused.isConnected && focused.id ? document.getElementById(focused.id) : null;
  if (again instanceof HTMLInputElement) {
    again.focus();
    again.setSelectionRange(again.value.length, again.value.length);
  }
}

/** The bar of a screen in its own window: the bot, its state, and control. */
function soloBar(b: BotView): HTMLElement {
  document.title = `${b.name} — Botdesk`;
  return el("header", { class: "bot-header solo-bar" }, el("span", { class: "avatar" }, initials(b.name)), el("h1", {}, b.name), el("span", { class: `pill ${b.status}`, id: "bot-status" }, STATUS[b.status]), controlActions(b));
}

function soloScreen(b: BotView): HTMLElement {
  const body = el("div", { class: "tab-body" });
  const v = viewers.get(b.id);
  if (v) {
    body.append(screenBar(v), v.el);
    v.setVisible(true);
  } else body.append(el("div", { class: "open-card" }, el("p", {}, `Opening ${b.name}'s screen…`)));
  return el("section", { class: "computer" }, body);
}

function header(b: BotView): HTMLElement {
  return el(
    "header",
    { class: "bot-header" },
    el("span", { class: "avatar large" }, initials(b.name)),
    el(
      "div",
      { class: "title" },
      el("h1", {}, b.name),
      el(
        "p",
        { class: "muted" },
        b.computer.scope === "team" ? `Team computer ${b.computer.name} · folder ${b.folder} · ` : `Private computer ${b.computer.name} · the whole home is its folder · `,
        button(b.computer.scope === "team" ? "Move to a Private computer" : "Move to the Team computer", {
          class: "inline-link",
          id: "switch-computer",
          title: "Both homes are kept. The bot's files and browser logins come along; nothing newer is overwritten.",
        }, () => switchComputer(b)),
      ),
    ),
    el("span", { class: `pill ${b.status}`, id: "bot-status" }, STATUS[b.status]),
    controlActions(b),
  );
}

/** Stop, Take control (pausing a running bot) or Release with a note for the bot. */
function controlActions(b: BotView): HTMLElement {
  const controlling = b.status === "you_have_control";
  const paused = controlling && b.run === "paused_for_you";
  const asked = controlling && b.run === "asked_for_you";
  const actions = el("div", { class: "actions" });
  if (b.run !== "none") {
    actions.append(button("Stop", { class: "danger", id: "stop-bot" }, () => stop(b.id)));
  }
  if (asked) {
    actions.append(button("Hand back, not done", { class: "ghost", id: "release-skipped", title: "Release without doing what the bot asked" }, () => release(b.id, true)));
  }
  if (paused || asked) {
    const note = el("input", { id: "handback-note", type: "text", maxlength: "2000", placeholder: "Note for the bot (optional)", "aria-label": "Note for the bot" }) as HTMLInputElement;
    note.value = state.notes.get(b.id) ?? "";
    note.addEventListener("input", () => state.notes.set(b.id, note.value));
    actions.append(note);
  }
  if (controlling) {
    actions.append(button("Release", { class: "primary", id: "control-button", "data-control": "release", title: paused ? "Hand the screen back: the bot goes on with its task" : "Hand the screen back" }, () => release(b.id)));
  } else if (b.status === "pausing" || (b.status === "running" && state.pausing.has(b.id))) {
    const wait = button("Pausing…", { class: "primary", id: "control-button", "data-control": "pausing", title: "The bot finishes its current step, then you get control" }, () => {});
    wait.disabled = true;
    actions.append(wait);
  } else if (b.status === "running") {
    actions.append(button("Pause and take control", { class: "primary", id: "control-button", "data-control": "pause", title: "The bot finishes its current step and waits; Release hands the screen back and it goes on" }, () => takeControl(b.id, true)));
  } else {
    actions.append(button("Take control", { class: "primary", id: "control-button", "data-control": "take" }, () => takeControl(b.id)));
  }
  return actions;
}

function controlNotice(b: BotView): HTMLElement {
  const e = state.controlError;
  const box = el("div", { class: "notice", id: "control-notice" });
  const moved = state.switched;
  if ((!e || e.bot !== b.id) && moved?.bot === b.id) {
    box.classList.add("info");
    box.append(el("span", { id: "switch-note" }, moved.text), button("Dismiss", { class: "ghost" }, () => ((state.switched = null), renderMain())));
    return box;
  }
  if (!e || e.bot !== b.id) {
    box.hidden = true;
    return box;
  }
  box.append(el("span", {}, e.code === "BOT_RUNNING" ? `${b.name} is working on a task. Pause it to take control (it goes on when you release), or stop it.` : e.message));
  if (e.code === "BOT_RUNNING") {
    box.append(button("Pause and take control", { class: "primary", id: "notice-pause" }, () => takeControl(b.id, true)));
    box.append(button("Stop the bot", { class: "danger", id: "notice-stop" }, () => stop(b.id)));
  }
  box.append(button("Dismiss", { class: "ghost" }, () => ((state.controlError = null), renderMain())));
  return box;
}

function chat(b: BotView): HTMLElement {
  const list = el("div", { class: "messages", id: "messages", "aria-live": "polite" });
  const items = state.chats.get(b.id);
  if (!items) {
    list.append(el("p", { class: "muted" }, "Loading the chat…"));
    loadChat(b.id);
  } else if (items.length === 0) {
    list.append(el("p", { class: "muted" }, b.model ? `Give ${b.name} a task below. Its replies, tool calls and screenshots appear here as it works.` : `${b.name} has no model yet: add one in Settings → Models, then create a bot with it.`));
  }
  for (const m of items ?? []) list.append(message(m));
  const live = state.live.get(b.id);
  if (live) list.append(el("div", { class: "msg assistant streaming", id: "live-reply" }, live));
  if (b.status === "waiting_for_you") list.append(el("div", { class: "msg needs-you" }, "The bot needs you. Take control of its screen, do what it asked, then press Release."));

  const input = el("textarea", { id: "task-input", rows: "2", placeholder: b.model ? `Tell ${b.name} what to do…` : "Choose a model first", "aria-label": "Task" }) as HTMLTextAreaElement;
  input.value = state.drafts.get(b.id) ?? "";
  input.disabled = !b.model;
  input.addEventListener("input", () => state.drafts.set(b.id, input.value));
  const send = async () => {
    const task = input.value.trim();
    if (!task) return;
    state.sendError.delete(b.id);
    try {
      await api.sendTask(b.id, task);
      state.drafts.delete(b.id);
      input.value = "";
      await refresh();
    } catch (e) {
      state.sendError.set(b.id, errorMessage(e));
      renderMain();
    }
  };
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      send();
    }
  });
  const composer = el("form", { class: "composer" }, input, button("Send", { class: "primary", id: "send-task", type: "button" }, send));
  const err = state.sendError.get(b.id);
  const spend = state.spend.get(b.id);
  const spent =
    spend && spend.tokens.output > 0
      ? el(
          "span",
          { class: "spent", title: `All runs: ${usageText(spend.tokens, spend.unpriced_calls ? null : spend.usd)}. Each run may spend ${spend.budget.tokens.toLocaleString("en-US")} tokens${spend.budget.usd ? ` or $${spend.budget.usd.toFixed(2)}` : ""} (botdesk bot budget).` },
          ` · all runs ${shortTokens(spend.tokens.input + spend.tokens.cache_read + spend.tokens.cache_write)} in, ${shortTokens(spend.tokens.output)} out${spend.unpriced_calls ? "" : `, $${spend.usd.toFixed(2)}`}`,
        )
      : "";
  const budget = button("Budget…", { class: "ghost small", id: "edit-budget", title: "What each run of this bot may spend" }, () => openBudget(b));
  const section = el("section", { class: "chat", "aria-label": "Chat" }, el("div", { class: "chat-head" }, el("h2", {}, `Chat · ${b.model ?? "no model"}`, spent), budget), list);
  if (err) section.append(el("p", { class: "error send-error" }, err));
  section.append(composer);
  requestAnimationFrame(() => (list.scrollTop = list.scrollHeight));
  return section;
}

/** 950, 11.6k, 2.31M */
function shortTokens(n: number): string {
  return n < 1000 ? String(n) : n < 1e6 ? `${(n / 1000).toFixed(1)}k` : `${(n / 1e6).toFixed(2)}M`;
}

function message(m: ChatItem): HTMLElement {
  const box = el("div", { class: `msg ${m.role}`, "data-message": String(m.id) });
  if (m.text) box.append(el("div", { class: "text" }, m.text));
  for (const c of m.calls) box.append(toolCall(c));
  if (m.usage) box.append(el("div", { class: "usage", title: "What this run's model calls cost so far" }, usageText(m.usage, m.cost_usd)));
  const fix = m.failure && failureFix(m.failure);
  if (fix) box.append(el("div", { class: "row failure-fix", "data-failure": m.failure! }, fix));
  return box;
}

/** What the person can do about a failed run, where the app has the place to do it. */
function failureFix(f: RunFailure): HTMLElement | null {
  switch (f) {
    case "MODEL_BAD_KEY":
    case "MODEL_UNKNOWN":
    case "MODEL_NO_IMAGES":
      return button("Open Settings → Models", { class: "small" }, () => openSettings());
    case "OVER_BUDGET": {
      const b = bot(state.selected);
      return b ? button("Raise the budget…", { class: "small" }, () => openBudget(b)) : null;
    }
    default:
      return null;
  }
}

/** A tool call, compact: name and its main argument; the result opens on click. */
function toolCall(c: ChatCall): HTMLElement {
  let summary = "";
  try {
    const a = JSON.parse(c.arguments || "{}");
    summary = a.command ?? a.path ?? a.url ?? a.target ?? a.reason ?? (a.actions ? `${a.actions.length} action${a.actions.length === 1 ? "" : "s"}` : "");
  } catch {
    summary = c.arguments;
  }
  const details = el("details", { class: `call ${c.status}`, "data-call": c.id });
  details.append(el("summary", {}, el("span", { class: "dot" }), el("code", {}, c.name), " ", el("span", { class: "arg" }, String(summary).slice(0, 120))));
  if (c.arguments && c.arguments !== "{}") details.append(el("pre", { class: "args" }, c.arguments));
  if (c.text) details.append(el("pre", { class: "result" }, c.text));
  const wrap = el("div", { class: "call-wrap" }, details);
  if (c.attachment) wrap.append(el("div", { class: "attachment" }, "📎 ", c.attachment));
  if (c.image) {
    const img = el("img", { class: "thumb", alt: `Screenshot after ${c.name}`, title: "Screenshot (click to enlarge)" }) as HTMLImageElement;
    const path = c.image;
    const set = (url: string) => (img.src = url);
    if (shots.has(path)) set(shots.get(path)!);
    else api.shot(path).then((url) => (shots.set(path, url), set(url))).catch(() => img.remove());
    img.addEventListener("click", () => modal("Screenshot", el("img", { class: "full-shot", src: img.src, alt: "Screenshot" })));
    wrap.append(img);
  }
  return wrap;
}

async function loadSpend(id: string) {
  try {
    state.spend.set(id, await api.botSpend(id));
    if (state.selected === id) renderChat();
  } catch {
    // The header then shows no totals; the chat itself is unaffected.
  }
}

async function loadChat(id: string) {
  loadSpend(id);
  try {
    state.chats.set(id, await api.chat(id));
  } catch (e) {
    state.chats.set(id, []);
    state.sendError.set(id, errorMessage(e));
  }
  if (state.selected === id) renderChat();
}

/** Re-renders only the chat column, keeping the person's typing and focus in the task box. */
function renderChat() {
  const b = bot(state.selected);
  const old = document.querySelector("section.chat");
  if (!b || !old) return renderMain();
  const typing = document.activeElement?.id === "task-input" ? (document.activeElement as HTMLTextAreaElement) : null;
  const [start, end] = typing ? [typing.selectionStart, typing.selectionEnd] : [0, 0];
  const fresh = chat(b);
  old.replaceWith(fresh);
  if (typing) {
    const input = document.getElementById("task-input") as HTMLTextAreaElement;
    input.focus();
    input.setSelectionRange(start, end);
  }
}

/** Run events from the engine: streamed text, messages, tool calls and results, statuses. */
function onRunEvent(e: RunEvent) {
  const items = state.chats.get(e.bot);
  const selected = state.selected === e.bot;
  switch (e.type) {
    case "delta": {
      state.live.set(e.bot, (state.live.get(e.bot) ?? "") + e.text);
      const live = document.getElementById("live-reply");
      if (selected && live) {
        live.textContent = state.live.get(e.bot)!;
        const list = document.getElementById("messages");
        if (list) list.scrollTop = list.scrollHeight;
        return;
      }
      break;
    }
    case "message": {
      if (e.item.role === "assistant") state.live.delete(e.bot);
      // The run's cost moves down to its newest message.
      const last = [...(items ?? [])].reverse().find((m) => m.run_id === e.item.run_id);
      if (last?.usage && !e.item.usage) {
        Object.assign(e.item, { usage: last.usage, cost_usd: last.cost_usd });
        delete last.usage;
        delete last.cost_usd;
      }
      items?.push(e.item);
      break;
    }
    case "tool": {
      // The bot's screen tab appears the moment it first uses a graphical tool.
      if (e.call.status === "running" && e.call.graphical && !viewers.has(e.bot)) {
        openScreen(e.bot, selected && state.activeTab === "overview").catch(() => {});
      }
      const all = items?.flatMap((m) => m.calls) ?? [];
      const known = all.find((c) => c.id === e.call.id);
      if (known) Object.assign(known, { status: e.call.status, text: e.call.text, image: e.call.image, attachment: e.call.attachment });
      else [...(items ?? [])].reverse().find((m) => m.run_id === e.run_id && m.role === "assistant")?.calls.push(e.call);
      break;
    }
    case "status":
      state.live.delete(e.bot);
      // The run's last message gets what it failed of, with the way to fix it.
      if (e.failure) loadChat(e.bot);
      if (["completed", "failed", "cancelled"].includes(e.status)) loadSpend(e.bot);
      refresh();
      break;
    case "activity":
      onActivity(e.bot, e.entry);
      return;
    case "restart":
      // The reply broke off and is asked for again: what streamed so far is not the answer.
      state.live.delete(e.bot);
      break;
    case "usage": {
      // The run's cost so far goes on its last message (as the chat shows it when loaded).
      const runItems = (items ?? []).filter((m) => m.run_id === e.run_id);
      for (const m of runItems) {
        delete m.usage;
        delete m.cost_usd;
      }
      if (runItems.length) Object.assign(runItems[runItems.length - 1], { usage: e.run, cost_usd: e.run_usd ?? undefined });
      break;
    }
  }
  if (selected) renderChat();
}

function computer(): HTMLElement {
  const tabs = el("nav", { class: "tabs", role: "tablist" });
  const tab = (id: string, label: string, closable: boolean) => {
    const t = el("div", { class: "tab" + (state.activeTab === id ? " active" : ""), role: "tab", "data-tab": id });
    t.append(el("span", {}, label));
    if (closable) {
      const x = el("button", { class: "tab-close", title: "Close this screen", "aria-label": `Close ${label}` }, "×");
      x.addEventListener("click", (e) => (e.stopPropagation(), closeTab(id)));
      t.append(x);
    }
    t.addEventListener("click", () => {
      state.activeTab = id;
      if (id !== "overview") state.selected = id;
      renderBots();
      renderMain();
    });
    return t;
  };
  tabs.append(tab("overview", "Overview", false));
  for (const id of state.tabs) tabs.append(tab(id, bot(id)?.name ?? "screen", true));

  const body = el("div", { class: "tab-body" });
  const b = bot(state.selected)!;
  if (state.activeTab === "overview") {
    body.append(overview());
  } else if (viewers.has(state.activeTab)) {
    const v = viewers.get(state.activeTab)!;
    body.append(screenBar(v), v.el);
  }
  if (state.activeTab === "overview" || !viewers.has(state.activeTab)) {
    if (!viewers.has(b.id)) {
      body.append(
        el(
          "div",
          { class: "open-card" },
          el("p", {}, `${b.name}'s desktop is closed.`),
          button("Open desktop", { class: "primary", id: "open-desktop" }, () =>
            openScreen(b.id).catch((e) => {
              state.controlError = { bot: b.id, message: errorMessage(e), code: errorCode(e) };
              renderMain();
            }),
          ),
        ),
      );
    }
  }
  // Only what is on screen keeps a live picture in the webview.
  for (const [id, v] of viewers) v.setVisible(state.activeTab === id);
  for (const v of thumbs.values()) v.setVisible(state.activeTab === "overview");
  return el("section", { class: "computer" }, tabs, body);
}

function screenBar(v: Viewer): HTMLElement {
  const mode = el("span", { class: "mode " + (v.control ? "control" : "view"), id: "screen-mode" }, v.control ? "You have control" : "View only");
  const bar = el("div", { class: "screen-bar" }, mode);
  if (v.control) {
    bar.append(
      button("Send clipboard", { class: "ghost" }, async () => {
        const text = await navigator.clipboard?.readText().catch(() => "");
        if (text) v.sendClipboard(text);
      }),
    );
  }
  const tools = el("span", { class: "screen-tools" });
  tools.append(
    button(v.actualSize ? "Fit to window" : "Actual size", { class: "ghost", id: "screen-scale", title: v.actualSize ? "Scale the screen to fit" : "One screen pixel on one pixel of yours; scroll to see the rest" }, () => {
      v.setActualSize(!v.actualSize);
      renderMain();
    }),
  );
  if (!SOLO) {
    tools.append(
      button(state.focus ? "Exit focus" : "Focus", { class: "ghost", id: "screen-focus", title: state.focus ? "Back to the chat and the dock (Esc)" : "Only the screen, as large as the window allows (Esc returns)" }, () => setFocus(!state.focus)),
      button("Own window", { class: "ghost", id: "screen-window", title: "Open this screen in a window of its own" }, () =>
        api.openScreenWindow(v.bot).catch((e) => {
          state.controlError = { bot: v.bot, message: errorMessage(e), code: errorCode(e) };
          renderMain();
        }),
      ),
    );
  }
  bar.append(tools);
  return bar;
}

function setFocus(on: boolean) {
  state.focus = on;
  renderMain();
  viewers.get(state.activeTab)?.canvas.focus();
}

/** Esc leaves focus mode (before the screen would pass it to the bot). */
let escapeTaken = false;
window.addEventListener(
  "keydown",
  (e) => {
    if (e.key !== "Escape" || !state.focus) return;
    e.preventDefault();
    e.stopPropagation();
    escapeTaken = true;
    setFocus(false);
  },
  true,
);
window.addEventListener(
  "keyup",
  (e) => {
    if (e.key !== "Escape" || !escapeTaken) return;
    e.preventDefault();
    e.stopPropagation();
    escapeTaken = false;
  },
  true,
);

function overview(): HTMLElement {
  const grid = el("div", { class: "overview" });
  if (state.tabs.length === 0) grid.append(el("p", { class: "muted" }, "Open a bot's desktop to watch it here; every open screen shows live."));
  for (const id of state.tabs) {
    if (!thumbs.has(id) && urls.has(id)) thumbs.set(id, new Viewer(urls.get(id)!, id, false));
    const t = thumbs.get(id);
    if (!t) continue;
    const cell = el("figure", { class: "thumb", "data-bot": id }, t.el, el("figcaption", {}, bot(id)?.name ?? id));
    cell.addEventListener("click", () => {
      state.activeTab = id;
      state.selected = id;
      renderBots();
      renderMain();
    });
    grid.append(cell);
  }
  return grid;
}

function dock(b: BotView): HTMLElement {
  const panes: Record<Dock, [string, string]> = {
    terminal: ["Terminal", `Commands ${b.name} runs, with their output, appear here live.`],
    files: ["Files", `${b.name}'s workspace folder (${b.folder}) — browse and preview, also offline.`],
    browser: ["Browser", `The page ${b.name}'s browser shows, its tabs and its text; drive it while you have control.`],
  };
  const bar = el("div", { class: "dock-bar" });
  for (const k of Object.keys(panes) as Dock[]) {
    bar.append(
      button(panes[k][0], { class: "dock-button" + (state.dock === k ? " active" : ""), "data-pane": k, "aria-pressed": String(state.dock === k) }, () => {
        state.dock = state.dock === k ? null : k;
        renderMain();
      }),
    );
  }
  const d = el("footer", { class: "dock" }, bar);
  if (state.dock === "terminal") d.append(activityPane(b));
  else if (state.dock === "files") d.append(filesPane(b));
  else if (state.dock === "browser") d.append(browserPane(b));
  api.watchFiles(state.dock === "files" ? b.id : null).catch(() => {});
  return d;
}

// ---------------------------------------------------------------------------------------------
// Actions

async function openScreen(id: string, focus = true): Promise<Viewer> {
  if (state.controlError?.bot === id) state.controlError = null;
  if (!viewers.has(id)) {
    const url = await api.openScreen(id);
    urls.set(id, url);
    const v = new Viewer(url, id, true);
    v.onSendClipboard = (text) =>
      api.setClipboard(id, text).catch((e) => {
        state.controlError = { bot: id, message: errorMessage(e), code: errorCode(e) };
        renderMain();
      });
    v.onBotClipboard = () =>
      api
        .botClipboard(id)
        .then((text) => {
          clipboardFromBot.last = text;
          if (text) return navigator.clipboard?.writeText(text);
        })
        .catch(() => {});
    v.onState = () => {
      if (state.activeTab === id) {
        const bar = document.querySelector(".screen-bar");
        bar?.replaceWith(screenBar(v));
      }
    };
    viewers.set(id, v);
    state.tabs.push(id);
  }
  if (focus) state.activeTab = id;
  renderMain();
  return viewers.get(id)!;
}

function closeTab(id: string) {
  viewers.get(id)?.close();
  thumbs.get(id)?.close();
  viewers.delete(id);
  thumbs.delete(id);
  urls.delete(id);
  state.tabs = state.tabs.filter((t) => t !== id);
  if (state.activeTab === id) state.activeTab = "overview";
  api.closeScreen(id);
  renderMain();
}

/** Take control; with `pause`, the bot's run first pauses at its next step boundary. */
async function takeControl(id: string, pause = false) {
  state.controlError = null;
  if (pause) {
    state.pausing.add(id);
    renderMain(); // "Pausing…" at once, while the bot finishes its step
  }
  try {
    await api.takeControl(id, pause);
    await openScreen(id);
  } catch (e) {
    state.controlError = { bot: id, message: errorMessage(e), code: errorCode(e) };
  }
  state.pausing.delete(id);
  await refresh(true);
}

async function release(id: string, skipped = false) {
  try {
    await api.releaseControl(id, skipped, state.notes.get(id)?.trim() || null);
    state.notes.delete(id);
  } catch (e) {
    state.controlError = { bot: id, message: errorMessage(e), code: errorCode(e) };
  }
  await refresh(true);
}

/** Moves a bot between the Team computer and its own Private one (both homes are kept). */
async function switchComputer(b: BotView) {
  const to = b.computer.scope === "team" ? "private" : "team";
  state.controlError = null;
  state.switched = { bot: b.id, text: `Moving ${b.name} to ${to === "team" ? "the Team computer" : "a Private computer"}: saving its work first…` };
  renderMain();
  try {
    const r = await api.switchBot(b.id, to);
    if (viewers.has(b.id)) closeTab(b.id); // its desktop was on the computer it left
    const count = r.copied === 1 ? "1 file" : `${r.copied} files`;
    const where = r.scope === "team" ? "the Team computer" : `its Private computer ${r.to}`;
    const left = r.scope === "team" ? `Its Private computer ${r.from} is kept, stopped.` : `The Team computer keeps ${r.bot}'s folder.`;
    const kept = r.kept_newer.length ? ` Kept the newer ${r.kept_newer.join(", ")} already there; ${r.bot}'s older copy stays on ${r.from}.` : "";
    state.switched = { bot: b.id, text: `${r.bot} now works on ${where}: ${count} came along${r.profile ? ", with its browser logins" : ""}. ${left}${kept}` };
  } catch (e) {
    state.switched = null;
    state.controlError = { bot: b.id, message: errorMessage(e), code: errorCode(e) };
  }
  await refresh(true);
}

async function stop(id: string) {
  try {
    await api.stopBot(id);
    state.controlError = null;
  } catch (e) {
    state.controlError = { bot: id, message: errorMessage(e), code: errorCode(e) };
  }
  await refresh(true);
}

function select(id: string) {
  state.selected = id;
  // The bot's own screen when it has one; otherwise the overview, which offers to open it.
  state.activeTab = viewers.has(id) ? id : "overview";
  renderBots();
  renderMain();
}

async function refresh(force = false) {
  try {
    const bots = await api.listBots();
    const changed = force || JSON.stringify(bots) !== JSON.stringify(state.bots);
    state.bots = bots;
    if (state.selected && !bots.some((b) => b.id === state.selected)) state.selected = null;
    if (changed) {
      renderBots();
      renderMain();
    }
  } catch (e) {
    $("bot-list").replaceChildren(el("li", { class: "error" }, errorMessage(e)));
  }
}

// ---------------------------------------------------------------------------------------------
// New bot, settings, first run

function setupNewBot() {
  const form = $<HTMLFormElement>("new-bot-form");
  const name = $<HTMLInputElement>("new-bot-name");
  const error = $("new-bot-error");
  const model = $<HTMLSelectElement>("new-bot-model");
  const open = async (show: boolean) => {
    form.hidden = !show;
    error.hidden = true;
    if (!show) return;
    name.focus();
    const models = await api.listModels().catch(() => []);
    model.replaceChildren(
      ...(models.length ? models.map((m) => el("option", { value: m.id }, `${m.id} (${m.model})`)) : [el("option", { value: "" }, "No model yet (add one in Settings)")]),
    );
  };
  $("new-bot").addEventListener("click", () => open(form.hidden));
  $("new-bot-cancel").addEventListener("click", () => open(false));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const scope = (form.querySelector("input[name=scope]:checked") as HTMLInputElement).value as Scope;
    try {
      const b = await api.createBot(name.value.trim(), scope, model.value || null);
      name.value = "";
      open(false);
      await refresh();
      select(b.id);
    } catch (err) {
      error.textContent = errorMessage(err);
      error.hidden = false;
    }
  });
}

function modal(title: string, ...body: Node[]): HTMLElement {
  const root = $("modal");
  const close = button("×", { class: "modal-close", "aria-label": "Close" }, () => (root.hidden = true));
  const box = el("div", { class: "modal", role: "dialog", "aria-label": title }, el("header", {}, el("h2", {}, title), close), ...body);
  root.replaceChildren(box);
  root.hidden = false;
  return box;
}

async function openSettings() {
  const view = await api.getSettings();
  const s = view.settings;
  const field = (label: string, input: HTMLElement, hint: string) => el("label", { class: "field" }, el("span", {}, label), input, el("small", {}, hint));
  const mem = el("input", { type: "number", min: "512", max: "65536", step: "256", value: String(s.memory_mib), id: "set-memory" }) as HTMLInputElement;
  const cpus = el("input", { type: "number", min: "0.5", max: "64", step: "0.5", value: String(s.cpus), id: "set-cpus" }) as HTMLInputElement;
  const limit = el("input", { type: "number", min: "1", max: "16", placeholder: "no limit", value: s.screen_limit ? String(s.screen_limit) : "", id: "set-limit" }) as HTMLInputElement;
  const msg = el("p", { class: "muted", id: "settings-message" });
  const form = el(
    "form",
    { class: "settings" },
    el("h3", {}, "Computers"),
    field("Memory (MiB)", mem, "Each computer's memory; applies to computers started after saving."),
    field("CPUs", cpus, "Each computer's CPU share."),
    field("Screen limit", limit, "At most this many bot desktops at once on one computer. Empty: no limit."),
    el("h3", {}, "Data"),
    el("dl", {}, el("dt", {}, "Data directory"), el("dd", {}, view.data_dir), el("dt", {}, "Computer image"), el("dd", {}, view.image)),
    el("p", { class: "muted" }, "Start the app with BOTDESK_DATA_DIR set to use another data directory."),
    el("div", { class: "row" }, el("button", { type: "submit", class: "primary" }, "Save")),
    msg,
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      await api.saveSettings({ memory_mib: Number(mem.value), cpus: Number(cpus.value), screen_limit: limit.value ? Number(limit.value) : null });
      msg.textContent = "Saved.";
      msg.className = "ok-text";
    } catch (err) {
      msg.textContent = errorMessage(err);
      msg.className = "error";
    }
  });
  modal("Settings", form, el("h3", {}, "Models"), await modelsSection());
}

/** What each run of a bot may spend: tokens (the default when empty) and dollars (no limit when
 *  empty), with what its runs have spent so far. A run that reaches either stops with a message. */
async function openBudget(b: BotView) {
  const spend = await api.botSpend(b.id).catch(() => null);
  const now = spend?.budget;
  const tokens = el("input", { type: "number", min: "1", step: "1", name: "tokens", id: "budget-tokens", placeholder: "2000000 (the default)", value: now ? String(now.tokens) : "" }) as HTMLInputElement;
  const usd = el("input", { type: "number", min: "0.01", step: "any", name: "usd", id: "budget-usd", placeholder: "no dollar limit", value: now?.usd != null ? String(now.usd) : "" }) as HTMLInputElement;
  const msg = el("p", { class: "muted", id: "budget-message" }, spend ? `So far, all runs: ${usageText(spend.tokens, spend.unpriced_calls ? null : spend.usd)}.` : "");
  const form = el(
    "form",
    { class: "settings budget-form" },
    el("label", { class: "field" }, el("span", {}, "Tokens per run"), tokens, el("small", {}, "Input, cache and output tokens together. Empty: the default, 2,000,000.")),
    el("label", { class: "field" }, el("span", {}, "Dollars per run"), usd, el("small", {}, "Counted with the model's prices (Settings → Models). Empty: no dollar limit.")),
    el("button", { type: "submit", class: "primary" }, "Save budget"),
    msg,
  ) as HTMLFormElement;
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      const saved = await api.setBotBudget(b.id, tokens.value ? Number(tokens.value) : null, usd.value ? Number(usd.value) : null);
      tokens.value = String(saved.tokens);
      msg.textContent = `Saved: each run of ${b.name} may spend ${saved.tokens.toLocaleString("en-US")} tokens${saved.usd != null ? ` or $${saved.usd.toFixed(2)}` : ""}, whichever comes first.`;
      msg.className = "ok";
      await loadSpend(b.id);
    } catch (err) {
      msg.textContent = errorMessage(err);
      msg.className = "error";
    }
  });
  modal(`Budget of ${b.name}`, form);
}

/** A model's context window, output per call and coordinate space, saved or back to its family's defaults. */
function limitsForm(m: ModelView, now: Limits, done: () => Promise<void>): HTMLElement {
  const num = (name: keyof Limits, label: string, hint: string) =>
    el("label", { class: "price" }, el("span", {}, label), el("input", { type: "number", min: "1", step: "1", name, value: String(now[name]), required: "", title: hint }));
  const coords = el(
    "select",
    { name: "coordinates" },
    el("option", { value: "pixels", ...(m.coordinates === "pixels" ? { selected: "" } : {}) }, "pixels of the screenshot"),
    el("option", { value: "0-1000", ...(m.coordinates === "0-1000" ? { selected: "" } : {}) }, "0–1000 on each axis"),
  ) as HTMLSelectElement;
  const msg = el("p", { class: "muted" }, "Tokens. A local server may run a model with a smaller window than it could take: give the one it runs.");
  const form = el(
    "form",
    { class: "limits-form", "data-limits-for": m.id },
    num("context_window", "Context window", "Tokens the model takes in per call"),
    num("max_output", "Output per call", "Tokens the model may give out per call"),
    el("label", { class: "price" }, el("span", {}, "Coordinates"), coords),
    el("button", { type: "submit", class: "primary" }, "Save"),
    button("Family defaults", { class: "ghost", type: "button" }, async () => {
      try {
        await api.setModelLimits(m.id, null);
        await api.setModelCoordinates(m.id, null);
        await done();
      } catch (e) {
        fail(e);
      }
    }),
    msg,
  ) as HTMLFormElement;
  const fail = (e: unknown) => {
    msg.textContent = errorMessage(e);
    msg.className = "error";
  };
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const v = (n: string) => Number((form.elements.namedItem(n) as HTMLInputElement).value);
    try {
      await api.setModelLimits(m.id, { context_window: v("context_window"), max_output: v("max_output") });
      await api.setModelCoordinates(m.id, coords.value as ModelView["coordinates"]);
      await done();
    } catch (err) {
      fail(err);
    }
  });
  return form;
}

/** A model's four prices (dollars per million tokens), saved or cleared. */
function pricesForm(id: string, now: Prices | null, done: () => Promise<void>): HTMLElement {
  const input = (name: keyof Prices, label: string) =>
    el("label", { class: "price" }, el("span", {}, label), el("input", { type: "number", min: "0", step: "0.01", name, value: now ? String(now[name]) : "", required: "" }));
  const msg = el("p", { class: "muted" }, "Dollars per million tokens, from the provider's price list.");
  const form = el(
    "form",
    { class: "prices-form", "data-prices-for": id },
    input("input", "Input"),
    input("output", "Output"),
    input("cache_read", "Cache read"),
    input("cache_write", "Cache write"),
    el("button", { type: "submit", class: "primary" }, "Save prices"),
    button("No prices", { class: "ghost", type: "button" }, () => save(null)),
    msg,
  ) as HTMLFormElement;
  const save = async (p: Prices | null) => {
    try {
      await api.setModelPrices(id, p);
      await done();
    } catch (e) {
      msg.textContent = errorMessage(e);
      msg.className = "error";
    }
  };
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const v = (n: string) => Number((form.elements.namedItem(n) as HTMLInputElement).value);
    save({ input: v("input"), output: v("output"), cache_read: v("cache_read"), cache_write: v("cache_write") });
  });
  return form;
}

/** Model providers: the list, and a form whose key goes to the system keyring only. */
async function modelsSection(): Promise<HTMLElement> {
  const box = el("section", { class: "models", id: "models" });
  const render = async () => {
    const models = await api.listModels();
    const list = el("ul", { class: "model-list" });
    if (models.length === 0) list.append(el("li", { class: "muted" }, "No model yet. Bots need one to work on tasks."));
    for (const m of models) {
      const rm = button("Remove", { class: "ghost" }, async () => {
        try {
          await api.removeModel(m.id);
          await render();
        } catch (e) {
          note.textContent = errorMessage(e);
          note.className = "error";
        }
      });
      const prices = await api.modelPrices(m.id).catch(() => null);
      const priced = prices ? `$${prices.input} in / $${prices.output} out per million tokens` : "no prices (runs show tokens only)";
      const edit = button("Prices", { class: "ghost", "data-edit-prices": m.id }, () => item.querySelector(".prices-form") || item.append(pricesForm(m.id, prices, render)));
      const limits = await api.modelLimits(m.id).catch(() => null);
      const sized = limits ? `${limits.context_window.toLocaleString("en-US")}-token window, up to ${limits.max_output.toLocaleString("en-US")} out per call` : "";
      const editLimits = button("Limits", { class: "ghost", "data-edit-limits": m.id }, () => limits && (item.querySelector(".limits-form") || item.append(limitsForm(m, limits, render))));
      const about = el(
        "div",
        { class: "model-about" },
        el("strong", {}, m.id),
        el("span", { class: "muted" }, ` ${m.kind} · ${m.model}${m.base_url ? " · " + m.base_url : ""} · ${m.has_key ? "key in the keyring" : "no key"} · coordinates ${m.coordinates}`),
        el("div", { class: "muted model-prices" }, priced),
        el("div", { class: "muted model-limits" }, sized),
      );
      const item = el("li", { "data-model": m.id }, about, edit, editLimits, rm);
      list.append(item);
    }
    const id = el("input", { placeholder: "id, e.g. claude", id: "model-id" }) as HTMLInputElement;
    const kind = el("select", { id: "model-kind" }, el("option", { value: "anthropic" }, "Anthropic"), el("option", { value: "openai" }, "OpenAI"), el("option", { value: "openai-compatible" }, "OpenAI-compatible (Ollama, vLLM, LM Studio, OpenRouter, xAI)")) as HTMLSelectElement;
    const model = el("input", { placeholder: "model, e.g. claude-sonnet-4-5", id: "model-name" }) as HTMLInputElement;
    const url = el("input", { placeholder: "base URL (OpenAI-compatible only)", id: "model-url" }) as HTMLInputElement;
    const key = el("input", { type: "password", placeholder: "API key (empty for a local server)", id: "model-key", autocomplete: "off" }) as HTMLInputElement;
    const note = el("p", { class: "muted" }, "The key is kept in the system keyring, never in the data directory.");
    const add = el("form", { class: "model-form" }, id, kind, model, url, key, el("button", { type: "submit", class: "primary" }, "Add model"), note);
    add.addEventListener("submit", async (e) => {
      e.preventDefault();
      try {
        await api.addModel(id.value.trim(), kind.value, model.value.trim(), url.value.trim() || null, key.value || null);
        key.value = "";
        await render();
      } catch (err) {
        note.textContent = errorMessage(err);
        note.className = "error";
      }
    });
    box.replaceChildren(list, add);
  };
  await render();
  return box;
}

function firstRun(report: DoctorReport) {
  const docker = report.checks.find((c) => c.name === "docker");
  const image = report.checks.find((c) => c.name === "image");
  const age = report.checks.find((c) => c.name === "image_age");
  const step = (n: number, title: string, ok: boolean | null, ...body: Node[]) =>
    el("section", { class: "step " + (ok === null ? "" : ok ? "done" : "todo") }, el("h3", {}, `${n}. ${title}`), ...body);
  const bar = el("div", { class: "progress", hidden: "" }, el("div", { class: "progress-fill" }));
  const stage = el("p", { class: "muted", id: "build-stage" });
  const stale = image?.ok && age?.warn;
  const build = button(stale ? "Rebuild with current packages" : "Build the computer image", { class: "primary", id: "build-image" }, async () => {
    build.disabled = true;
    bar.hidden = false;
    const fill = bar.firstElementChild as HTMLElement;
    const show = (p: BuildProgress) => {
      if (p.stage === "step") fill.style.width = `${Math.round((100 * p.step) / p.total)}%`;
      stage.textContent = p.stage === "done" ? `Built ${p.image}.` : p.message;
    };
    try {
      await api.buildImage(show, !!stale);
      fill.style.width = "100%";
      state.health = await api.doctor();
      renderHealth();
    } catch (e) {
      stage.textContent = errorMessage(e);
      stage.className = "error";
      build.disabled = false;
    }
  });
  if (!docker?.ok) build.disabled = true;
  modal(
    "Set up Botdesk",
    step(1, "Docker", docker?.ok ?? false, el("p", {}, docker?.detail ?? ""), ...(docker?.ok ? [] : [el("p", { class: "muted" }, `Fix: ${docker?.fix ?? ""}`)])),
    step(
      2,
      "The computer image",
      (image?.ok ?? false) && !stale,
      el("p", {}, image?.detail ?? ""),
      ...(stale ? [el("p", { class: "warning" }, age?.detail ?? ""), el("p", { class: "muted" }, `Fix: ${age?.fix ?? ""}`)] : []),
      ...(image?.ok && !stale ? [] : [build, bar, stage]),
    ),
    step(3, "A model", null, el("p", { class: "muted" }, "Add the model your bots will use (you can also do it later in Settings)."), button("Add a model…", { id: "first-run-model" }, () => openSettings())),
    el(
      "div",
      { class: "row" },
      button("Check again", {}, async () => {
        state.health = await api.doctor();
        renderHealth();
        firstRun(state.health);
      }),
    ),
  );
}

/** A screen in its own window: that bot's screen and control only; it follows the same events. */
async function startSolo(id: string) {
  $("app").classList.add("solo");
  state.selected = id;
  await refresh(true);
  await openScreen(id).catch((e) => {
    state.controlError = { bot: id, message: errorMessage(e), code: errorCode(e) };
    renderMain();
  });
  // The app's events keep it current; the main window keeps the slow safety-net poll.
  api.onBotsChanged(() => refresh());
  api.onRunEvent(onRunEvent);
  window.addEventListener("focus", () => refresh());
}

async function start() {
  setupNewBot();
  $("open-settings").addEventListener("click", openSettings);
  renderHealth();
  await refresh(true);
  await api.uiReady(state.bots.length);
  api.doctor().then((r) => {
    state.health = r;
    renderHealth();
    if (!r.checks.every((c) => c.ok || c.name === "keyring")) firstRun(r);
  });
  // Statuses change in the engine (runs, control, the CLI on the same data directory): the app
  // emits an event; a slow poll is only the safety net.
  api.onBotsChanged(() => {
    // A run of another process (the CLI) shows up in the chat too.
    if (state.selected) loadChat(state.selected);
    refresh();
  });
  api.onRunEvent(onRunEvent);
  api.onFilesChanged(onFilesChanged);
  setInterval(refresh, 5000);
  window.addEventListener("focus", () => refresh());
}

if (SOLO) startSolo(SOLO);
else start();
