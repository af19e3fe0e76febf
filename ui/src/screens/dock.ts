// The dock under the workspace: the Terminal pane (what the bot ran and wrote, live, and the
// person's shell while in control), the Files pane (the stored workspace: browse, preview,
// download, also offline; upload while in control) and the Browser pane (the page the bot's
// Chromium shows, driven by the person while in control).
import { browseVersion, closeHistory, download, driveBrowser, listDir, lookAgain, openHistory, restoreFrom, selectFile, setDock, setTerminalTab, upload } from "../actions";
import { button, el } from "../dom";
import { baseName, humanSize } from "../format";
import { bot, Dock, live, state } from "../store";
import type { ActivityRow, BotRow, BrowserGo, History } from "../types";

export function dock(b: BotRow): HTMLElement {
  const panes: Record<Dock, [string, string]> = {
    terminal: ["Terminal", `Commands ${b.name} runs, with their output, appear here live.`],
    files: ["Files", `${b.name}'s workspace folder (${b.folder}) — browse and preview, also offline.`],
    browser: ["Browser", `The page ${b.name}'s browser shows, its tabs and its text; drive it while you have control.`],
  };
  const bar = el("div", { class: "dock-bar" });
  for (const k of Object.keys(panes) as Dock[]) {
    bar.append(
      button(panes[k][0], { class: "dock-button" + (state.dock === k ? " active" : ""), "data-pane": k, "aria-pressed": String(state.dock === k), title: panes[k][1] }, () =>
        setDock(state.dock === k ? null : k),
      ),
    );
  }
  const d = el("footer", { class: "dock", id: "dock" }, bar);
  const pane = dockPane(b);
  if (pane) d.append(pane);
  return d;
}

function dockPane(b: BotRow): HTMLElement | null {
  if (state.dock === "terminal") return terminalPane(b);
  if (state.dock === "files") return filesPane(b);
  if (state.dock === "browser") return browserPane(b);
  return null;
}

/** Draws only the open pane again (its data changed). */
export function renderDock(): boolean {
  const b = bot(state.selected);
  const old = document.querySelector("#dock .dock-pane");
  if (!b || !old) return false;
  const pane = dockPane(b);
  if (!pane) return false;
  // The activity list stays at its end while new entries come, unless the person scrolled up.
  const list = old.querySelector("#activity-list");
  const stick = !list || list.scrollTop + list.clientHeight >= list.scrollHeight - 8;
  old.replaceWith(pane);
  const fresh = pane.querySelector("#activity-list");
  if (fresh && stick) fresh.scrollTop = fresh.scrollHeight;
  else if (fresh && list) fresh.scrollTop = list.scrollTop;
  return true;
}

// ---------------------------------------------------------------------------------------------
// Terminal

function terminalPane(b: BotRow): HTMLElement {
  const controlling = b.status === "you_have_control";
  const tab = (k: "activity" | "shell", label: string, enabled: boolean, title: string) => {
    const t = button(label, { class: "term-tab" + (state.terminalTab === k ? " active" : ""), "data-term-tab": k, title }, () => setTerminalTab(k));
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
  const shell = live.shells.get(b.id);
  if (state.terminalTab === "shell" && controlling && shell) {
    pane.append(shell.host);
    return pane;
  }
  const list = el("div", { class: "activity-list", id: "activity-list" });
  const rows = state.activity.get(b.id);
  if (!rows) list.append(el("p", { class: "muted" }, "Loading…"));
  else if (rows.length === 0) list.append(el("p", { class: "muted" }, `Nothing yet: commands ${b.name} runs and files it writes appear here, live.`));
  else for (const a of rows) list.append(activityEntry(a));
  pane.append(list);
  return pane;
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

// ---------------------------------------------------------------------------------------------
// Files

/** "4 Dec 15:02" in the person's time zone. */
function when(ms: number): string {
  const d = new Date(ms);
  return `${d.toLocaleDateString("en-GB", { day: "numeric", month: "short" })} ${d.toLocaleTimeString("en-GB", { hour: "2-digit", minute: "2-digit" })}`;
}

/** The versions of the bot's folder, newest first: browse one, or put it all back. */
function historyList(b: BotRow, h: History): HTMLElement {
  const list = el("ul", { class: "history-list", "aria-label": "Versions" });
  for (const v of h.versions) {
    const c = v.changes;
    const changes = c.written || c.removed ? `${c.written} written (${humanSize(c.bytes)})${c.removed ? `, ${c.removed} removed` : ""}` : "no changes here";
    list.append(
      el(
        "li",
        { class: "version" + (v.current ? " current" : ""), "data-version": String(v.version) },
        el("span", { class: "vnum" }, `v${v.version}`),
        el("span", { class: "vwhen" }, when(v.at)),
        el("span", { class: "vwhy" }, v.label + (v.current ? " · latest" : "")),
        el("span", { class: "vchanges muted" }, changes),
        button("Browse", { class: "ghost small", "data-browse": String(v.version) }, () => browseVersion(v.version)),
        button("Restore all", { class: "ghost small", "data-restore": String(v.version), title: `Put ${b.name}'s folder back as it was in version ${v.version} (what is there now is kept as a version)` }, () =>
          restoreFrom(v.version, null),
        ),
      ),
    );
  }
  if (h.versions.length === 0) list.append(el("li", { class: "muted" }, "Nothing saved yet: a version is made when a run ends and when the computer stops."));
  const head = el(
    "div",
    { class: "files-bar" },
    el("strong", {}, "History"),
    el("span", { class: "muted" }, ` ${h.versions.length} versions · ${humanSize(h.disk_bytes)} on disk · every version kept ${h.keep.all_hours} h, then one a day for ${h.keep.daily_days} days`),
    button("Back to files", { class: "ghost", id: "history-close" }, () => closeHistory()),
  );
  return el("div", { class: "history" }, head, list);
}

function filesPane(b: BotRow): HTMLElement {
  const files = state.files;
  const msgs = el("div", { class: "files-msgs" });
  if (files.error) msgs.append(el("p", { class: "error" }, files.error));
  if (files.note) msgs.append(el("p", { class: "ok" }, files.note));
  if (files.history) return el("section", { class: "dock-pane files", "data-pane": "files", id: "files-pane" }, msgs, historyList(b, files.history));
  const controlling = b.status === "you_have_control";
  const version = files.version;
  const up = files.shown && files.shown !== "." ? files.shown.split("/").slice(0, -1).join("/") : null;
  const crumbs = el("div", { class: "files-bar" }, el("code", { class: "files-path", id: "files-path" }, files.shown || "…"));
  if (up !== null) crumbs.prepend(button("↑", { class: "ghost", title: "Up one folder", id: "files-up" }, () => listDir(up === "" ? "/" : up)));
  if (version === null) {
    const uploader = el("label", { class: "upload" + (controlling ? "" : " disabled"), title: controlling ? "Upload a file into this folder (up to 10 MiB)" : "Take control to upload files" }, "Upload…");
    const input = el("input", { type: "file", id: "files-upload" }) as HTMLInputElement;
    input.disabled = !controlling;
    input.addEventListener("change", () => input.files?.[0] && upload(input.files[0]));
    uploader.append(input);
    crumbs.append(button("History", { class: "ghost", id: "files-history", title: `Earlier versions of ${b.name}'s folder: browse one, restore a file or all of it` }, () => openHistory()), uploader);
  } else {
    crumbs.append(
      el("span", { class: "version-banner", id: "version-banner" }, `Version ${version} (read-only)`),
      button("Restore this folder", { class: "ghost", id: "restore-folder", title: `Put ${b.name}'s whole folder back as it was in version ${version}` }, () => restoreFrom(version, null)),
      button("Back to now", { class: "ghost", id: "version-close" }, () => browseVersion(null)),
    );
  }

  const list = el("ul", { class: "files-list", "aria-label": "Files" });
  const sorted = [...files.entries].sort((a, b) => Number(b.kind === "dir") - Number(a.kind === "dir") || a.path.localeCompare(b.path));
  for (const e of sorted) {
    const item = el(
      "li",
      { class: `file ${e.kind}` + (files.selected === e.path ? " selected" : ""), "data-path": e.path, tabindex: "0" },
      el("span", { class: "fname" }, baseName(e.path) + (e.kind === "dir" ? "/" : "")),
      el("span", { class: "fsize" }, e.kind === "file" ? humanSize(e.size) : ""),
    );
    item.addEventListener("click", () => (e.kind === "dir" ? listDir(e.path) : selectFile(e.path)));
    list.append(item);
  }
  if (sorted.length === 0) list.append(el("li", { class: "muted" }, "This folder is empty."));

  const preview = el("div", { class: "preview", id: "files-preview" });
  const p = files.preview;
  const path = files.selected;
  if (path && p) {
    const head = el("div", { class: "preview-head" }, el("code", {}, baseName(path)), el("span", { class: "muted" }, humanSize(p.size)));
    head.append(button("Download", { class: "ghost", id: "files-download" }, () => download(path)));
    if (version !== null) head.append(button("Restore this file", { class: "primary small", id: "restore-file", title: `Put it back as it was in version ${version}` }, () => restoreFrom(version, path)));
    preview.append(head);
    if (p.kind === "text") preview.append(el("pre", { class: "preview-text" }, p.text));
    else if (p.kind === "image") preview.append(el("img", { class: "preview-img", src: p.url, alt: baseName(path) }));
    else if (p.kind === "too_large") preview.append(el("p", { class: "muted" }, "Too large to preview (text up to 2 MiB, images up to 10 MiB). Download it instead."));
    else preview.append(el("p", { class: "muted" }, "Not text or an image: download it to open it."));
  } else {
    preview.append(el("p", { class: "muted" }, version === null ? "Pick a file to preview it. This is the stored workspace: it is here even when the computer is stopped." : `Pick a file to see it as it was in version ${version}.`));
  }
  return el("section", { class: "dock-pane files", "data-pane": "files", id: "files-pane" }, crumbs, msgs, el("div", { class: "files-body" }, list, preview));
}

// ---------------------------------------------------------------------------------------------
// Browser

function browserPane(b: BotRow): HTMLElement {
  const s = state.looks.get(b.id) ?? { view: null, error: null, busy: false, typed: null };
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
