// What the person does, and what follows an event: each action calls the backend, puts what it
// learned in the store and says what changed. The only module besides the modal forms that calls
// the api; the only one that opens or closes screens and shells.
import { api, errorCode, errorMessage } from "./api";
import { el } from "./dom";
import { applyBots, bot, changed, Dock, KEEP_ACTIVITY, live, SOLO, state } from "./store";
import type { BotRow, BrowserGo, ChatItem, ComputerScope, RunEvent, Verdict } from "./types";
import { Viewer } from "./viewer";

/** The bot's clipboard text last put on the person's, when they asked (the app tests read it). */
const clipboardFromBot = { last: null as string | null };
(window as any).__botdesk.clipboard = clipboardFromBot;

function refused(id: string, e: unknown) {
  state.controlError = { bot: id, message: errorMessage(e), code: errorCode(e) };
  changed("main");
}

// ---------------------------------------------------------------------------------------------
// Bots and what is shown

/** Reads the bot list afresh (after the person's own actions; otherwise `bots-changed` brings it). */
export async function refresh() {
  try {
    // Numbered with the bots-changed events: an event newer than this read wins over it.
    afterBotsChanged(applyBots(await api.listBots()));
  } catch (e) {
    state.botsError = errorMessage(e);
    changed("bots");
  }
}

/** Follows what changed in bots' states: a run of another process (the CLI) shows in the chat,
 *  a shell closes with the control it needed, the dock follows a bot that moved. */
export function afterBotsChanged(moved: BotRow[]) {
  for (const b of moved) {
    if (state.chats.has(b.id)) loadChat(b.id);
    if (b.status !== "you_have_control") closeShell(b.id);
  }
  syncDock();
}

export async function createBot(name: string, scope: ComputerScope, model: string | null, host: string) {
  const b = await api.createBot(name, scope, model, host);
  await refresh();
  select(b.id);
}

export function select(id: string) {
  // The bot's own screen when it has one; otherwise the overview, which offers to open it.
  showTab(live.viewers.has(id) ? id : "overview", id);
}

/** Shows a tab: a bot's screen, or the overview (with `bot` selected beside it). */
export function showTab(tab: string, id: string | null = tab === "overview" ? state.selected : tab) {
  state.activeTab = tab;
  state.selected = id;
  if (tab === "overview") {
    state.focus = false;
    for (const t of state.tabs) thumbOf(t);
  }
  if (id && !state.chats.has(id)) loadChat(id);
  syncDock();
  changed("bots", "main");
}

export async function loadSpend(id: string) {
  try {
    state.spend.set(id, await api.botSpend(id));
    if (state.selected === id) changed("chat");
  } catch {
    // The header then shows no totals; the chat itself is unaffected.
  }
}

export async function loadChat(id: string) {
  loadSpend(id);
  try {
    // What run events brought meanwhile may be newer than what was read: read it again then.
    let items: ChatItem[];
    let seen: number | undefined;
    do {
      seen = state.chatEvents.get(id);
      items = await api.chat(id);
    } while (seen !== state.chatEvents.get(id));
    state.chats.set(id, items);
    loadShots(items);
    const q = await api.openQuestion(id);
    if (q) state.questions.set(id, q);
    else state.questions.delete(id);
  } catch (e) {
    state.chats.set(id, []);
    state.sendError.set(id, errorMessage(e));
  }
  if (state.selected === id) changed("chat");
}

/** The person's answer to what the bot's run asks (an approval, a safety check). */
export async function answerQuestion(bot: string, verdict: Verdict, note: string | null) {
  try {
    await api.answerQuestion(bot, verdict, note);
    state.questions.delete(bot);
  } catch (e) {
    state.sendError.set(bot, errorMessage(e));
  }
  if (state.selected === bot) changed("chat");
}

/** Fetches the screenshots the chat shows that are not here yet. */
function loadShots(items: ChatItem[]) {
  for (const c of items.flatMap((m) => m.calls)) {
    const path = c.image;
    if (!path || state.shots.has(path)) continue;
    state.shots.set(path, ""); // asked for once
    api
      .shot(path)
      .then((url) => {
        state.shots.set(path, url);
        changed("chat");
      })
      .catch(() => {});
  }
}

export async function sendTask(id: string, task: string) {
  state.sendError.delete(id);
  try {
    await api.sendTask(id, task);
    state.drafts.delete(id);
    await refresh();
  } catch (e) {
    state.sendError.set(id, errorMessage(e));
  }
  changed("chat");
}

/** What follows a run event beyond the store: the screen opens at a graphical tool, screenshots
 *  load, and the bot's totals are read again when its run ends. */
export function afterRunEvent(e: RunEvent) {
  if (e.type === "tool") {
    if (e.call.status === "running" && e.call.graphical && !live.viewers.has(e.bot)) {
      openScreen(e.bot, state.selected === e.bot && state.activeTab === "overview").catch(() => {});
    }
    loadShots([{ calls: [e.call] } as ChatItem]);
  }
  if (e.type === "status" && ["completed", "failed", "cancelled"].includes(e.status)) loadSpend(e.bot);
  // A run whose process died was ended elsewhere: its chat (closed calls, the reason) is read again.
  if (e.type === "status" && e.failure === "INTERRUPTED") loadChat(e.bot);
}

// ---------------------------------------------------------------------------------------------
// Screens

function thumbOf(id: string) {
  const url = live.urls.get(id);
  if (!live.thumbs.has(id) && url) live.thumbs.set(id, new Viewer(url, id, false));
}

export async function openScreen(id: string, focus = true): Promise<Viewer> {
  if (state.controlError?.bot === id) state.controlError = null;
  if (!live.viewers.has(id)) {
    const url = await api.openScreen(id);
    live.urls.set(id, url);
    const v = new Viewer(url, id, true);
    v.onSendClipboard = (text) => api.setClipboard(id, text).catch((e) => refused(id, e));
    v.onBotClipboard = (asked) => {
      if (asked) return copyBotClipboard(v);
      v.botClipboardWaiting = true;
      if (state.activeTab === id) changed("screen-bar");
    };
    v.onState = () => {
      if (state.activeTab === id) changed("screen-bar");
    };
    live.viewers.set(id, v);
    state.tabs.push(id);
    if (state.activeTab === "overview") thumbOf(id);
  }
  if (focus) state.activeTab = id;
  changed("main");
  return live.viewers.get(id)!;
}

/** The bot's clipboard onto the person's: only when they ask (Ctrl+C on its screen, or the
 *  screen bar's button), so nothing a bot or a page copies lands where they paste unseen. */
export function copyBotClipboard(v: Viewer) {
  v.botClipboardWaiting = false;
  if (state.activeTab === v.bot) changed("screen-bar");
  api
    .copyBotClipboard(v.bot)
    .then((text) => {
      clipboardFromBot.last = text;
    })
    .catch((e) => refused(v.bot, e));
}

/** The Open desktop button (and a screen's own window): a refusal shows in the notice. */
export function openDesktop(id: string) {
  openScreen(id).catch((e) => refused(id, e));
}

export function closeTab(id: string) {
  live.viewers.get(id)?.close();
  live.thumbs.get(id)?.close();
  live.viewers.delete(id);
  live.thumbs.delete(id);
  live.urls.delete(id);
  state.tabs = state.tabs.filter((t) => t !== id);
  if (state.activeTab === id) showTab("overview");
  api.closeScreen(id);
  changed("main");
}

export function setFocus(on: boolean) {
  state.focus = on && state.activeTab !== "overview";
  changed("main");
  queueMicrotask(() => live.viewers.get(state.activeTab)?.canvas.focus());
}

export function setActualSize(v: Viewer, on: boolean) {
  v.setActualSize(on);
  changed("main");
}

export function openScreenWindow(id: string) {
  api.openScreenWindow(id).catch((e) => refused(id, e));
}

// ---------------------------------------------------------------------------------------------
// Control

/** Take control; with `pause`, the bot's run first pauses at its next step boundary. */
export async function takeControl(id: string, pause = false) {
  state.controlError = null;
  if (pause) {
    state.pausing.add(id);
    changed("main"); // "Pausing…" at once, while the bot finishes its step
  }
  try {
    await api.takeControl(id, pause);
    await openScreen(id);
  } catch (e) {
    state.controlError = { bot: id, message: errorMessage(e), code: errorCode(e) };
  }
  state.pausing.delete(id);
  await refresh();
  changed("main");
}

export async function release(id: string, skipped = false) {
  try {
    await api.releaseControl(id, skipped, state.notes.get(id)?.trim() || null);
    state.notes.delete(id);
  } catch (e) {
    state.controlError = { bot: id, message: errorMessage(e), code: errorCode(e) };
  }
  await refresh();
  changed("main");
}

/** Moves a bot between the Team computer and its own Private one (both homes are kept). */
export async function switchComputer(b: BotRow) {
  const to = b.computer.scope === "team" ? "private" : "team";
  state.controlError = null;
  state.switched = { bot: b.id, text: `Moving ${b.name} to ${to === "team" ? "the Team computer" : "a Private computer"}: saving its work first…` };
  changed("main");
  let done: string | null = null;
  try {
    const r = await api.switchBot(b.id, to);
    if (live.viewers.has(b.id)) closeTab(b.id); // its desktop was on the computer it left
    const count = r.copied === 1 ? "1 file" : `${r.copied} files`;
    const where = r.scope === "team" ? "the Team computer" : `its Private computer ${r.to}`;
    const left = r.scope === "team" ? `Its Private computer ${r.from} is kept, stopped.` : `The Team computer keeps ${r.bot}'s folder.`;
    const kept = r.kept_newer.length ? ` Kept the newer ${r.kept_newer.join(", ")} already there; ${r.bot}'s older copy stays on ${r.from}.` : "";
    done = `${r.bot} now works on ${where}: ${count} came along${r.profile ? ", with its browser logins" : ""}. ${left}${kept}`;
  } catch (e) {
    state.controlError = { bot: b.id, message: errorMessage(e), code: errorCode(e) };
  }
  // The note and the bot's new computer show together (a redraw meanwhile shows neither).
  await refresh();
  state.switched = done ? { bot: b.id, text: done } : null;
  changed("main");
}

export async function stop(id: string) {
  try {
    await api.stopBot(id);
    state.controlError = null;
  } catch (e) {
    state.controlError = { bot: id, message: errorMessage(e), code: errorCode(e) };
  }
  await refresh();
  changed("main");
}

export function dismissNotice(which: "error" | "switched") {
  if (which === "error") state.controlError = null;
  else state.switched = null;
  changed("main");
}

// ---------------------------------------------------------------------------------------------
// The dock

export function setDock(k: Dock | null) {
  state.dock = k;
  saveLayout();
  syncDock();
  changed("main");
}

/** The narrowest and widest the chat may be, px. */
export const CHAT_WIDTH = { min: 220, max: 640 };

/** The chat's width beside the screen (kept within bounds, remembered). */
export function setChatWidth(px: number) {
  state.chatWidth = Math.round(Math.min(CHAT_WIDTH.max, Math.max(CHAT_WIDTH.min, px)));
  document.getElementById("app")?.style.setProperty("--chat-width", `${state.chatWidth}px`);
  saveLayout();
}

function saveLayout() {
  if (layoutKey) localStorage.setItem(layoutKey, JSON.stringify({ dock: state.dock, chat: state.chatWidth }));
}

/** Where the layout is remembered: one key per data directory (a second data directory, or a
 *  test's, starts as it was left there). */
let layoutKey: string | null = null;

/** The layout as the person left it: which dock pane is open (none: the screen gets the room)
 *  and how wide the chat is. */
export async function restoreLayout() {
  try {
    layoutKey = `botdesk.layout:${(await api.getSettings()).data_dir}`;
    const saved = JSON.parse(localStorage.getItem(layoutKey) ?? "{}");
    if (["terminal", "files", "browser"].includes(saved.dock)) state.dock = saved.dock as Dock;
    if (typeof saved.chat === "number") setChatWidth(saved.chat);
  } catch {
    // A layout that cannot be read is the default one.
  }
}

/** What the dock shows for the selected bot is loaded, and only the visible Files pane is watched. */
function syncDock() {
  // A screen's own window has no dock: it must not end the Files watch the main window asked for.
  if (SOLO) return;
  const b = bot(state.selected);
  api.watchFiles(state.dock === "files" && b ? b.id : null).catch(() => {});
  if (!b) return;
  if (state.dock === "terminal" && !state.activity.has(b.id)) loadActivity(b.id);
  if (state.dock === "terminal" && state.terminalTab === "shell" && b.status === "you_have_control") openShell(b.id);
  if (state.dock === "files" && (state.files.bot !== b.id || state.files.computer !== b.computer.id)) {
    Object.assign(state.files, { bot: b.id, computer: b.computer.id, dir: "", shown: "", entries: [], selected: null, preview: null, error: null, note: null, version: null, history: null });
    listDir("");
  }
  if (state.dock === "browser" && !state.looks.has(b.id)) {
    state.looks.set(b.id, { view: null, error: null, busy: false, typed: null });
    lookAgain(b.id);
  }
}

async function loadActivity(id: string) {
  try {
    state.activity.set(id, (await api.activity(id)).slice(-KEEP_ACTIVITY));
  } catch (e) {
    state.activity.set(id, []);
    console.warn("activity", errorMessage(e));
  }
  changed("dock");
}

export function setTerminalTab(k: "activity" | "shell") {
  state.terminalTab = k;
  if (k === "shell" && state.selected) openShell(state.selected);
  changed("dock");
}

/** A shell on the bot's computer, in its folder (xterm.js loads only now: it is most of the UI's code). */
function openShell(id: string) {
  if (live.shells.has(id)) return;
  const host = el("div", { class: "shell-host", id: "shell-host" });
  const shell = { term: null as import("@xterm/xterm").Terminal | null, host, id: null as string | null, closed: false };
  live.shells.set(id, shell);
  requestAnimationFrame(async () => {
    const [{ Terminal }] = await Promise.all([import("@xterm/xterm"), import("@xterm/xterm/css/xterm.css")]);
    if (shell.closed) return;
    const term = new Terminal({ fontSize: 12, fontFamily: '"DejaVu Sans Mono", monospace', cursorBlink: true, theme: { background: "#0b0d12" } });
    shell.term = term;
    term.open(host);
    const cols = Math.max(20, Math.floor(host.clientWidth / 7.3));
    const rows = Math.max(4, Math.floor(host.clientHeight / 15));
    term.resize(cols, rows);
    // One keystroke batch in flight at a time: commands run concurrently, so sending each
    // keystroke as it comes could reorder fast typing. What is typed meanwhile goes next, together.
    let pending = "";
    let sending = false;
    const flush = async () => {
      if (sending) return;
      sending = true;
      while (pending && shell.id) {
        const chunk = pending;
        pending = "";
        await api.terminalInput(shell.id, chunk).catch((e) => term.write(`\r\n[${errorMessage(e)}]\r\n`));
      }
      sending = false;
    };
    term.onData((d) => {
      pending += d;
      void flush();
    });
    try {
      shell.id = await api.terminalOpen(id, cols, rows, (bytes) => {
        if (bytes) term.write(bytes);
        else {
          term.write("\r\n[the shell has ended]\r\n");
          shell.id = null;
        }
      });
      term.focus();
    } catch (e) {
      term.write(`[${errorMessage(e)}]\r\n`);
    }
  });
}

/** Control ended: the shell is closed (the engine kills it too). */
function closeShell(id: string) {
  const s = live.shells.get(id);
  if (!s) return;
  s.closed = true;
  if (s.id) api.terminalClose(s.id).catch(() => {});
  s.term?.dispose();
  live.shells.delete(id);
  if (state.terminalTab === "shell") state.terminalTab = "activity";
  changed("dock");
}

export async function listDir(dir: string) {
  const f = state.files;
  const id = f.bot;
  if (!id) return;
  try {
    const r = await api.listFiles(id, dir, f.version);
    if (f.bot !== id) return;
    Object.assign(f, { dir, shown: r.path, entries: r.entries, error: null });
  } catch (e) {
    f.error = errorMessage(e);
  }
  changed("dock");
}

export async function selectFile(path: string) {
  const f = state.files;
  const id = f.bot;
  if (!id) return;
  f.selected = path;
  f.note = null;
  try {
    f.preview = await api.preview(id, path, f.version);
  } catch (e) {
    f.preview = null;
    f.error = errorMessage(e);
  }
  changed("dock");
}

/** The stored workspace changed (the bot wrote something): read what the pane shows again. */
export function filesChanged(id: string) {
  if (state.files.bot !== id || state.dock !== "files" || state.selected !== id) return;
  listDir(state.files.dir);
  if (state.files.selected) selectFile(state.files.selected);
}

/** Opens the History list of the Files pane: the versions of the bot's folder. */
export async function openHistory() {
  const f = state.files;
  if (!f.bot) return;
  f.error = null;
  try {
    f.history = await api.history(f.bot);
  } catch (e) {
    f.error = errorMessage(e);
  }
  changed("dock");
}

export function closeHistory() {
  state.files.history = null;
  changed("dock");
}

/** Browses a kept version (read-only), or the folder as it is now (null). */
export async function browseVersion(version: number | null) {
  const f = state.files;
  Object.assign(f, { version, history: null, selected: null, preview: null, note: null, error: null });
  await listDir("");
}

/** Puts the bot's folder (`path` null) or one path back as it was in `version`. */
export async function restoreFrom(version: number, path: string | null) {
  const f = state.files;
  if (!f.bot) return;
  f.error = null;
  try {
    const r = await api.restore(f.bot, version, path);
    const folder = bot(f.bot)?.folder ?? "";
    const what = path === null ? "the folder" : folder && path.startsWith(folder + "/") ? path.slice(folder.length + 1) : path;
    const undo = r.saved ? ` What was there is version ${r.saved}: restore it to undo this.` : "";
    Object.assign(f, { version: null, history: null, selected: null, preview: null });
    await listDir(f.dir);
    f.note = `Restored ${what} from version ${r.from}.${undo}`;
  } catch (e) {
    f.error = errorMessage(e);
  }
  changed("dock");
}

/** "Undo this run's file changes" in the chat. */
export async function undoRun(bot: string, run: string) {
  try {
    const r = await api.undoRun(run);
    state.undone.set(run, `Undone: the folder is back to version ${r.from}.${r.saved ? ` What the run left is version ${r.saved} (Files → History).` : ""}`);
    filesChanged(bot);
  } catch (e) {
    state.undone.set(run, errorMessage(e));
  }
  changed("chat");
}

export async function upload(file: File) {
  const f = state.files;
  if (!f.bot) return;
  try {
    const data = await base64(file);
    const at = await api.upload(f.bot, `${f.shown === "." ? "" : f.shown + "/"}${file.name}`.replace(/^\//, "/"), data);
    f.note = `Uploaded ${at}`;
    await listDir(f.dir);
  } catch (e) {
    f.error = errorMessage(e);
    changed("dock");
  }
}

function base64(f: File): Promise<string> {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(String(r.result).split(",")[1] ?? "");
    r.onerror = () => reject(r.error);
    r.readAsDataURL(f);
  });
}

export async function download(path: string) {
  const f = state.files;
  if (!f.bot) return;
  try {
    f.note = `Saved to ${await api.download(f.bot, path, f.version)}`;
  } catch (e) {
    f.error = errorMessage(e);
  }
  changed("dock");
}

export async function lookAgain(id: string) {
  const s = state.looks.get(id)!;
  try {
    s.view = await api.browserView(id);
    s.error = null;
  } catch (e) {
    s.error = errorMessage(e);
  }
  changed("dock");
}

export async function driveBrowser(id: string, go: BrowserGo) {
  const s = state.looks.get(id)!;
  s.busy = true;
  changed("dock");
  try {
    await api.browserGo(id, go);
    s.error = null;
  } catch (e) {
    s.error = errorMessage(e);
  }
  s.busy = false;
  await lookAgain(id);
}
