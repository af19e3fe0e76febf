// The one store: everything the screens show, and how the engine's events change it. Nothing here
// calls the backend or touches the page: actions (actions.ts) fetch and act, the screens
// (screens/) draw what is here, and `changed` says which parts to draw again.
import type { Terminal } from "@xterm/xterm";
import type { ActivityRow, BotList, BotRow, BotSpend, BrowserView, ChatItem, DoctorReport, ErrorCode, FileEntry, History, Preview, Question, RunEvent } from "./types";
import type { Viewer } from "./viewer";

export type Dock = "terminal" | "files" | "browser";

/** What a change asks the screens to draw again (see main.ts). */
export type Part = "bots" | "main" | "chat" | "live-reply" | "dock" | "health" | "screen-bar";

/** A window of its own showing one bot's screen (`index.html?screen=BOT_ID`), or null. */
export const SOLO = new URLSearchParams(location.search).get("screen");

/** The Terminal pane keeps at most this many activity entries per bot. */
export const KEEP_ACTIVITY = 300;

/** The last look at a bot's browser, what went wrong, whether it is being driven, and the address
 *  the person is typing (it outlives a redraw). */
export interface Look {
  view: BrowserView | null;
  error: string | null;
  busy: boolean;
  typed: string | null;
}

export const state = {
  bots: [] as BotRow[],
  /** Why the bot list could not be read. */
  botsError: null as string | null,
  /** The number of the bot list shown (`BotList.seq`): an older list that arrives later is not applied. */
  botsSeq: 0,
  selected: null as string | null,
  health: null as DoctorReport | null,
  /** Bots whose screen has a tab, in opening order. */
  tabs: [] as string[],
  activeTab: "overview" as string,
  dock: null as Dock | null,
  /** The chat's width beside the screen, px (the person drags or arrows its edge). */
  chatWidth: 300,
  /** The last refusal of Take control and the like (shown with a Stop button when a run holds the bot). */
  controlError: null as { bot: string; message: string; code: ErrorCode | null } | null,
  /** What the last move between the Team computer and a Private one did, or "moving" meanwhile. */
  switched: null as { bot: string; text: string } | null,
  /** Chat per bot id (loaded when first shown), streamed text of the running reply, send errors. */
  chats: new Map<string, ChatItem[]>(),
  live: new Map<string, string>(),
  /** The question each bot's run waits on (a safety check), until answered. */
  questions: new Map<string, Question>(),
  /** Why a bot's next model call waits, and until when (ms since the epoch), until anything else comes. */
  waiting: new Map<string, { why: string; until: number }>(),
  /** Run events applied per bot: a chat read from the backend while events came is read again. */
  chatEvents: new Map<string, number>(),
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
  /** Screenshot data URLs by path (they never change). */
  shots: new Map<string, string>(),
  /** The Terminal pane: activity per bot (loaded when first shown), and which tab it shows. */
  activity: new Map<string, ActivityRow[]>(),
  terminalTab: "activity" as "activity" | "shell",
  /** The Files pane: the stored workspace of one bot on one computer (a bot that moved starts afresh). */
  files: {
    bot: null as string | null,
    computer: null as string | null,
    /** What was asked for, and the folder that answered. */
    dir: "",
    shown: "",
    entries: [] as FileEntry[],
    selected: null as string | null,
    preview: null as Preview | null,
    error: null as string | null,
    note: null as string | null,
    /** Browsing this kept version of the folder (read-only; null: as it is now). */
    version: null as number | null,
    /** The versions, while the History list is open. */
    history: null as History | null,
  },
  /** What "Undo this run's file changes" did, by run id (said in place of the button). */
  undone: new Map<string, string>(),
  /** The Browser pane, per bot. */
  looks: new Map<string, Look>(),
};

/** A shell of the person on a bot's computer (only while they hold control). */
export interface Shell {
  term: Terminal | null;
  host: HTMLElement;
  id: string | null;
  closed: boolean;
}

/** Live things the screens place but do not make: each open screen's viewer (its tab) and
 *  thumbnail (the overview), the screens' addresses, and the person's shells. Actions own them. */
export const live = {
  viewers: new Map<string, Viewer>(),
  thumbs: new Map<string, Viewer>(),
  urls: new Map<string, string>(),
  shells: new Map<string, Shell>(),
};

export const bot = (id: string | null) => state.bots.find((b) => b.id === id);

// ---------------------------------------------------------------------------------------------
// Changes

let pending = new Set<Part>();
let draw: (parts: Set<Part>) => void = () => {};

/** The screens' drawing, called once per batch of changes. */
export function onChange(f: (parts: Set<Part>) => void) {
  draw = f;
}

/** Asks for `parts` to be drawn again; changes made in the same turn are drawn once. */
export function changed(...parts: Part[]) {
  if (pending.size === 0) queueMicrotask(flush);
  for (const p of parts) pending.add(p);
}

function flush() {
  const parts = pending;
  pending = new Set();
  draw(parts);
}

// ---------------------------------------------------------------------------------------------
// Events, applied as they come

/** Every bot with its state (the `bots-changed` event, or a fresh list), when newer than what is
 *  shown. Returns the bots whose status or run changed, which actions follow up on. */
export function applyBots(list: BotList): BotRow[] {
  if (state.botsError) {
    state.botsError = null;
    changed("bots");
  }
  if (list.seq <= state.botsSeq) return [];
  state.botsSeq = list.seq;
  const rows = list.bots;
  const before = new Map(state.bots.map((b) => [b.id, b]));
  const same = JSON.stringify(rows) === JSON.stringify(state.bots);
  state.bots = rows;
  if (state.selected && !rows.some((b) => b.id === state.selected)) state.selected = null;
  if (!same) changed("bots", "main");
  return rows.filter((b) => {
    const was = before.get(b.id);
    return was && (was.status !== b.status || was.run !== b.run);
  });
}

/** A run event of this app's runs: streamed text, messages, tool calls and results, costs. */
export function applyRunEvent(e: RunEvent) {
  const items = state.chats.get(e.bot);
  const shown = state.selected === e.bot;
  // A chat read overlapping an event that changes the chat is read again (streamed text and
  // activity are not in the chat's read).
  if (e.type !== "delta" && e.type !== "activity" && e.type !== "waiting") state.chatEvents.set(e.bot, (state.chatEvents.get(e.bot) ?? 0) + 1);
  if (e.type !== "waiting" && e.type !== "activity" && state.waiting.delete(e.bot) && shown) changed("chat");
  switch (e.type) {
    case "waiting":
      state.waiting.set(e.bot, { why: e.why, until: Date.now() + e.seconds * 1000 });
      if (shown) changed("chat");
      return;
    case "question":
      state.questions.set(e.bot, { id: e.id, run_id: e.run_id, bot_id: e.bot, kind: e.kind, question: e.question, asked_at: Date.now(), answer: null, note: null });
      break;
    case "answered":
      if (state.questions.get(e.bot)?.id === e.id) state.questions.delete(e.bot);
      break;
    case "delta":
      state.live.set(e.bot, (state.live.get(e.bot) ?? "") + e.text);
      if (shown) changed("live-reply");
      return;
    case "message": {
      if (e.item.role === "assistant") state.live.delete(e.bot);
      // A chat read just now may hold it already.
      if (!items || items.some((m) => m.id === e.item.id)) break;
      // The run's cost, and what it failed of, move down to its newest message (a chat read
      // while the run ended may have put them on the one before).
      const last = [...items].reverse().find((m) => m.run_id === e.item.run_id);
      if (last?.usage && !e.item.usage) {
        Object.assign(e.item, { usage: last.usage, cost_usd: last.cost_usd });
        delete last.usage;
        delete last.cost_usd;
      }
      if (last?.failure && !e.item.failure) {
        e.item.failure = last.failure;
        delete last.failure;
      }
      items.push(e.item);
      break;
    }
    case "tool": {
      const known = items?.flatMap((m) => m.calls).find((c) => c.id === e.call.id);
      if (known) Object.assign(known, { status: e.call.status, text: e.call.text, image: e.call.image, attachment: e.call.attachment });
      else [...(items ?? [])].reverse().find((m) => m.run_id === e.run_id && m.role === "assistant")?.calls.push(e.call);
      break;
    }
    case "status": {
      state.live.delete(e.bot);
      // The run's last message gets what it failed of, with the way to fix it.
      const last = [...(items ?? [])].reverse().find((m) => m.run_id === e.run_id);
      if (last && e.failure) last.failure = e.failure;
      break;
    }
    case "activity":
      applyActivity(e.bot, e.entry);
      return;
    case "restart":
      // The reply broke off and is asked for again: what streamed so far is not the answer.
      state.live.delete(e.bot);
      break;
    case "saved": {
      // The run's end was saved: its last message offers to undo what it changed.
      const last = [...(items ?? [])].reverse().find((m) => m.run_id === e.run_id);
      if (last && e.files_changed) last.files_changed = e.files_changed;
      break;
    }
    case "usage": {
      // The run's cost so far goes on its last message (as the chat shows it when loaded).
      const runItems = (items ?? []).filter((m) => m.run_id === e.run_id);
      for (const m of runItems) {
        delete m.usage;
        delete m.cost_usd;
      }
      if (runItems.length) Object.assign(runItems[runItems.length - 1]!, { usage: e.run, cost_usd: e.run_usd ?? undefined });
      break;
    }
  }
  if (shown) changed("chat");
}

/** A new or finished activity entry of a run of this app. */
export function applyActivity(bot: string, entry: ActivityRow) {
  const rows = state.activity.get(bot);
  if (!rows) return; // loaded with what is stored when the pane first shows it
  const i = rows.findIndex((r) => r.id === entry.id);
  if (i >= 0) {
    // A late "running" never overwrites an end.
    if (!(entry.status === "running" && rows[i]!.status !== "running")) rows[i] = entry;
  } else {
    rows.push(entry);
    if (rows.length > KEEP_ACTIVITY) rows.splice(0, rows.length - KEEP_ACTIVITY);
  }
  if (state.selected === bot && state.dock === "terminal") changed("dock");
}
