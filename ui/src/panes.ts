// The dock's Terminal pane (what the bot ran and wrote, live), Files pane (the stored workspace:
// browse, preview, download — also offline — and upload while in control) and Browser pane (the
// page the bot's Chromium shows, driven by the person while in control).
// xterm.js is loaded only when a shell opens (it is most of the UI's code).
import type { Terminal } from "@xterm/xterm";
import { ActivityRow, api, BotView, BrowserGo, BrowserView, errorMessage, FileEntry, Preview } from "./api";
import { button, el, humanSize } from "./dom";

// ---------------------------------------------------------------------------------------------
// Terminal

const activity = new Map<string, ActivityRow[]>();
let shownBot: string | null = null;

/** Keeps at most this many entries per bot in the pane. */
const KEEP = 300;

let terminalTab: "activity" | "shell" = "activity";

/** The person's shell per bot (only while they hold control). */
const shells = new Map<string, { term: Terminal | null; host: HTMLElement; id: string | null; closed: boolean }>();

export function activityPane(b: BotView): HTMLElement {
  shownBot = b.id;
  const controlling = b.status === "you_have_control";
  if (!controlling) closeShell(b.id);
  const tab = (k: "activity" | "shell", label: string, enabled: boolean, title: string) => {
    const t = button(label, { class: "term-tab" + (terminalTab === k ? " active" : ""), "data-term-tab": k, title }, () => {
      terminalTab = k;
      const pane = document.getElementById("terminal-pane");
      pane?.replaceWith(activityPane(b));
    });
    t.disabled = !enabled;
    return t;
  };
  const tabs = el(
    "div",
    { class: "term-tabs" },
    tab("activity", "Activity", true, "What the bot ran and wrote"),
    tab("shell", "Shell", controlling, controlling ? "A shell on the bot's computer, in its folder" : "Take control to open a shell on the bot's computer"),
  );
  const pane = el("section", { class: "dock-pane terminal", "data-pane": "terminal", id: "terminal-pane" }, tabs);
  if (terminalTab === "shell" && controlling) {
    pane.append(shellView(b.id));
  } else {
    const list = el("div", { class: "activity-list", id: "activity-list" });
    pane.append(list);
    fillActivity(list, b);
    if (!activity.has(b.id)) loadActivity(b.id);
  }
  return pane;
}

function shellView(bot: string): HTMLElement {
  let s = shells.get(bot);
  if (!s) {
    const host = el("div", { class: "shell-host", id: "shell-host" });
    const shell = { term: null as Terminal | null, host, id: null as string | null, closed: false };
    s = shell;
    shells.set(bot, shell);
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
        shell.id = await api.terminalOpen(bot, cols, rows, (bytes) => {
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
  return s.host;
}

/** Control ended: the shell is closed (the engine kills it too). */
function closeShell(bot: string) {
  const s = shells.get(bot);
  if (!s) return;
  s.closed = true;
  if (s.id) api.terminalClose(s.id).catch(() => {});
  s.term?.dispose();
  shells.delete(bot);
  if (terminalTab === "shell") terminalTab = "activity";
}

async function loadActivity(bot: string) {
  try {
    const rows = await api.activity(bot);
    activity.set(bot, rows.slice(-KEEP));
  } catch (e) {
    activity.set(bot, []);
    console.warn("activity", errorMessage(e));
  }
  redrawActivity(bot);
}

function redrawActivity(bot: string) {
  const list = document.getElementById("activity-list");
  if (list && shownBot === bot) fillActivity(list, null);
}

function fillActivity(pane: HTMLElement, b: BotView | null) {
  const rows = activity.get(shownBot ?? "");
  const stick = pane.scrollTop + pane.clientHeight >= pane.scrollHeight - 8;
  pane.replaceChildren();
  if (!rows) {
    pane.append(el("p", { class: "muted" }, "Loading…"));
    return;
  }
  if (rows.length === 0) {
    pane.append(el("p", { class: "muted" }, `Nothing yet: commands ${b?.name ?? "the bot"} runs and files it writes appear here, live.`));
    return;
  }
  for (const a of rows) pane.append(activityEntry(a));
  if (stick) pane.scrollTop = pane.scrollHeight;
}

function activityEntry(a: ActivityRow): HTMLElement {
  const when = new Date(a.created_at).toLocaleTimeString();
  const badge =
    a.status === "running" ? "running…" : a.kind === "shell" ? (a.exit_code === 0 ? "exit 0" : `exit ${a.exit_code ?? "?"}`) : a.status === "done" ? "done" : "error";
  const head = el(
    "div",
    { class: "act-head" },
    el("span", { class: "act-time" }, when),
    el("span", { class: "act-kind" }, a.kind === "shell" ? "$" : a.kind),
    el("span", { class: "act-target" }, a.target),
    el("span", { class: `act-badge ${a.status}` }, badge),
  );
  const box = el("div", { class: `act ${a.status}`, "data-activity": String(a.id) }, head);
  if (a.output_tail) box.append(el("pre", { class: "act-out" }, a.output_tail));
  return box;
}

/** A new or finished entry from a run of this app. */
export function onActivity(bot: string, entry: ActivityRow) {
  const rows = activity.get(bot);
  if (!rows) return;
  const i = rows.findIndex((r) => r.id === entry.id);
  if (i >= 0) {
    // A late "running" never overwrites an end.
    if (!(entry.status === "running" && rows[i]!.status !== "running")) rows[i] = entry;
  } else {
    rows.push(entry);
    if (rows.length > KEEP) rows.splice(0, rows.length - KEEP);
  }
  redrawActivity(bot);
}

/** Entries written by another process (the CLI) are picked up when the pane reloads. */
export function reloadActivity(bot: string) {
  if (activity.has(bot)) loadActivity(bot);
}

// ---------------------------------------------------------------------------------------------
// Files

const files = {
  bot: null as string | null,
  /** The computer whose workspace is shown (a bot moved to another computer starts afresh). */
  computer: null as string | null,
  dir: "",
  shown: "" as string,
  entries: [] as FileEntry[],
  selected: null as string | null,
  preview: null as Preview | null,
  error: null as string | null,
  note: null as string | null,
  controlling: false,
};

export function filesPane(b: BotView): HTMLElement {
  if (files.bot !== b.id || files.computer !== b.computer.id) {
    Object.assign(files, { bot: b.id, computer: b.computer.id, dir: "", shown: "", entries: [], selected: null, preview: null, error: null, note: null });
    listDir("");
  }
  files.controlling = b.status === "you_have_control";
  const pane = el("section", { class: "dock-pane files", "data-pane": "files", id: "files-pane" });
  fillFiles(pane);
  return pane;
}

async function listDir(dir: string) {
  const bot = files.bot;
  if (!bot) return;
  try {
    const r = await api.listFiles(bot, dir);
    if (files.bot !== bot) return;
    Object.assign(files, { dir, shown: r.path, entries: r.entries, error: null });
  } catch (e) {
    files.error = errorMessage(e);
  }
  redrawFiles();
}

async function select(path: string) {
  const bot = files.bot;
  if (!bot) return;
  files.selected = path;
  files.note = null;
  try {
    files.preview = await api.preview(bot, path);
  } catch (e) {
    files.preview = null;
    files.error = errorMessage(e);
  }
  redrawFiles();
}

function redrawFiles() {
  const pane = document.getElementById("files-pane");
  if (pane) fillFiles(pane);
}

function name(path: string): string {
  return path.split("/").pop() || path;
}

function fillFiles(pane: HTMLElement) {
  const bot = files.bot!;
  const up = files.shown && files.shown !== "." ? files.shown.split("/").slice(0, -1).join("/") : null;
  const crumbs = el("div", { class: "files-bar" }, el("code", { class: "files-path", id: "files-path" }, files.shown || "…"));
  if (up !== null) crumbs.prepend(button("↑", { class: "ghost", title: "Up one folder", id: "files-up" }, () => listDir(up === "" ? "/" : up)));
  const upload = el("label", { class: "upload" + (files.controlling ? "" : " disabled"), title: files.controlling ? "Upload a file into this folder (up to 10 MiB)" : "Take control to upload files" }, "Upload…");
  const input = el("input", { type: "file", id: "files-upload" }) as HTMLInputElement;
  input.disabled = !files.controlling;
  input.addEventListener("change", async () => {
    const f = input.files?.[0];
    if (!f) return;
    try {
      const data = await base64(f);
      const at = await api.upload(bot, `${files.shown === "." ? "" : files.shown + "/"}${f.name}`.replace(/^\//, "/"), data);
      files.note = `Uploaded ${at}`;
      await listDir(files.dir);
    } catch (e) {
      files.error = errorMessage(e);
      redrawFiles();
    }
  });
  upload.append(input);
  crumbs.append(upload);

  const list = el("ul", { class: "files-list", "aria-label": "Files" });
  const sorted = [...files.entries].sort((a, b) => Number(b.kind === "dir") - Number(a.kind === "dir") || a.path.localeCompare(b.path));
  for (const e of sorted) {
    const item = el(
      "li",
      { class: `file ${e.kind}` + (files.selected === e.path ? " selected" : ""), "data-path": e.path, tabindex: "0" },
      el("span", { class: "fname" }, name(e.path) + (e.kind === "dir" ? "/" : "")),
      el("span", { class: "fsize" }, e.kind === "file" ? humanSize(e.size) : ""),
    );
    item.addEventListener("click", () => (e.kind === "dir" ? listDir(e.path) : select(e.path)));
    list.append(item);
  }
  if (sorted.length === 0) list.append(el("li", { class: "muted" }, "This folder is empty."));

  const preview = el("div", { class: "preview", id: "files-preview" });
  const p = files.preview;
  if (files.selected && p) {
    const head = el("div", { class: "preview-head" }, el("code", {}, name(files.selected)), el("span", { class: "muted" }, humanSize(p.size)));
    const path = files.selected;
    head.append(
      button("Download", { class: "ghost", id: "files-download" }, async () => {
        try {
          files.note = `Saved to ${await api.download(bot, path)}`;
        } catch (e) {
          files.error = errorMessage(e);
        }
        redrawFiles();
      }),
    );
    preview.append(head);
    if (p.kind === "text") preview.append(el("pre", { class: "preview-text" }, p.text));
    else if (p.kind === "image") preview.append(el("img", { class: "preview-img", src: p.url, alt: name(path) }));
    else if (p.kind === "too_large") preview.append(el("p", { class: "muted" }, "Too large to preview (text up to 2 MiB, images up to 10 MiB). Download it instead."));
    else preview.append(el("p", { class: "muted" }, "Not text or an image: download it to open it."));
  } else {
    preview.append(el("p", { class: "muted" }, "Pick a file to preview it. This is the stored workspace: it is here even when the computer is stopped."));
  }
  const msgs = el("div", { class: "files-msgs" });
  if (files.error) msgs.append(el("p", { class: "error" }, files.error));
  if (files.note) msgs.append(el("p", { class: "ok" }, files.note));
  pane.replaceChildren(crumbs, msgs, el("div", { class: "files-body" }, list, preview));
}

function base64(f: File): Promise<string> {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(String(r.result).split(",")[1] ?? "");
    r.onerror = () => reject(r.error);
    r.readAsDataURL(f);
  });
}

/** The stored workspace changed (the bot wrote something): refresh what the pane shows. */
export function onFilesChanged(bot: string) {
  if (files.bot !== bot || !document.getElementById("files-pane")) return;
  listDir(files.dir);
  if (files.selected) select(files.selected);
}

// ---------------------------------------------------------------------------------------------
// Browser

/** The last look at each bot's browser, what went wrong, and whether it is being driven. */
const looks = new Map<string, { view: BrowserView | null; error: string | null; busy: boolean; typed: string | null }>();
let browserBot: BotView | null = null;

export function browserPane(b: BotView): HTMLElement {
  browserBot = b;
  if (!looks.has(b.id)) {
    looks.set(b.id, { view: null, error: null, busy: false, typed: null });
    lookAgain(b.id);
  }
  const s = looks.get(b.id)!;
  const controlling = b.status === "you_have_control";
  const page = s.view?.page ?? null;
  const why = controlling ? "" : "Take control to drive the bot's browser";
  const drive = (go: BrowserGo) => driveBrowser(b.id, go);
  const navButton = (label: string, id: string, title: string, go: BrowserGo) => {
    const n = button(label, { class: "ghost", id, title: why || title, "aria-label": title }, () => drive(go));
    n.disabled = !controlling || s.busy || !page;
    return n;
  };
  const address = el("input", { id: "browser-address", type: "text", "aria-label": "Address", placeholder: "https://…", title: why }) as HTMLInputElement;
  // What the person is typing outlives a redraw (a status change, a new look at the page).
  address.value = s.typed ?? page?.url ?? "";
  address.addEventListener("input", () => (s.typed = address.value));
  address.disabled = !controlling || s.busy;
  const form = el("form", { class: "browser-go" }, address, el("button", { type: "submit", id: "browser-go" }, "Go")) as HTMLFormElement;
  (form.querySelector("button") as HTMLButtonElement).disabled = !controlling || s.busy;
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const url = address.value.trim();
    s.typed = null;
    if (url) drive({ go: "navigate", url });
  });
  const bar = el(
    "div",
    { class: "browser-bar" },
    navButton("◀", "browser-back", "Back", { go: "back" }),
    navButton("▶", "browser-forward", "Forward", { go: "forward" }),
    navButton("⟳", "browser-reload", "Reload", { go: "reload" }),
    form,
    button("Look again", { class: "ghost", id: "browser-look", title: "Read the page again" }, () => lookAgain(b.id)),
  );
  const pane = el("section", { class: "dock-pane browser", id: "browser-pane", "data-pane": "browser" }, bar);
  if (s.error) pane.append(el("p", { class: "error", id: "browser-error" }, s.error));
  if (!s.view) pane.append(el("p", { class: "muted" }, "Looking at the bot's browser…"));
  else if (s.view.closed || !page) pane.append(el("p", { class: "muted", id: "browser-closed" }, `${b.name}'s browser is not open. It opens when the bot browses${controlling ? ", or when you go to an address" : ""}.`));
  else {
    pane.append(el("h3", { id: "browser-title" }, page.title || page.url));
    const tabs = el("ul", { class: "browser-tabs", id: "browser-tabs" });
    for (const t of s.view.tabs) tabs.append(el("li", { class: t.current ? "current" : "", title: t.url }, t.title || t.url));
    pane.append(tabs, el("pre", { class: "browser-text", id: "browser-text" }, page.text));
    const elements = el("details", { class: "browser-elements" }, el("summary", {}, `${page.elements.length} element${page.elements.length === 1 ? "" : "s"} the bot can act on`));
    for (const e of page.elements) elements.append(el("div", {}, `${e.role} "${e.name}" [${e.ref}]${e.value !== null ? ` = ${e.value}` : ""}`));
    pane.append(elements);
  }
  return pane;
}

function redrawBrowser(bot: string) {
  if (browserBot?.id === bot) document.getElementById("browser-pane")?.replaceWith(browserPane(browserBot));
}

async function lookAgain(bot: string) {
  const s = looks.get(bot)!;
  try {
    s.view = await api.browserView(bot);
    s.error = null;
  } catch (e) {
    s.error = errorMessage(e);
  }
  redrawBrowser(bot);
}

async function driveBrowser(bot: string, go: BrowserGo) {
  const s = looks.get(bot)!;
  s.busy = true;
  redrawBrowser(bot);
  try {
    await api.browserGo(bot, go);
    s.error = null;
  } catch (e) {
    s.error = errorMessage(e);
  }
  s.busy = false;
  await lookAgain(bot);
}
