// The screens: a tab per open screen and the overview of all of them live; the screen's bar
// (control, clipboard, scale, focus, own window); focus mode's Esc.
import { closeTab, copyBotClipboard, openDesktop, openScreenWindow, setActualSize, setFocus, showTab } from "../actions";
import { button, el } from "../dom";
import { bot, live, SOLO, state } from "../store";
import type { BotRow } from "../types";
import type { Viewer } from "../viewer";

export function computer(b: BotRow): HTMLElement {
  const tabs = el("nav", { class: "tabs", role: "tablist" });
  const tab = (id: string, label: string, closable: boolean) => {
    const active = state.activeTab === id;
    const t = el("div", { class: "tab" + (active ? " active" : ""), role: "tab", "data-tab": id, tabindex: "0", "aria-selected": String(active), "aria-label": label });
    t.append(el("span", {}, label));
    if (closable) {
      const x = el("button", { class: "tab-close", title: "Close this screen", "aria-label": `Close ${label}` }, "×");
      x.addEventListener("click", (e) => (e.stopPropagation(), closeTab(id)));
      t.append(x);
    }
    t.addEventListener("click", () => showTab(id));
    // Enter or Space opens a tab; the arrows open the next or the one before (focus follows).
    t.addEventListener("keydown", (e) => {
      const order = ["overview", ...state.tabs];
      const at = order.indexOf(id);
      const to = e.key === "Enter" || e.key === " " ? id : e.key === "ArrowRight" ? order[(at + 1) % order.length] : e.key === "ArrowLeft" ? order[(at - 1 + order.length) % order.length] : null;
      if (!to || e.target !== t) return;
      e.preventDefault();
      showTab(to);
      requestAnimationFrame(() => (document.querySelector(`.tab[data-tab="${to}"]`) as HTMLElement | null)?.focus());
    });
    return t;
  };
  tabs.append(tab("overview", "Overview", false));
  for (const id of state.tabs) tabs.append(tab(id, bot(id)?.name ?? "screen", true));

  const body = el("div", { class: "tab-body" });
  const shown = live.viewers.get(state.activeTab);
  if (state.activeTab === "overview") body.append(overview());
  else if (shown) body.append(screenBar(shown), shown.el);
  if (!shown && !live.viewers.has(b.id)) {
    body.append(
      el(
        "div",
        { class: "open-card" },
        el("p", {}, `${b.name}'s desktop is closed.`),
        button("Open desktop", { class: "primary", id: "open-desktop" }, () => openDesktop(b.id)),
      ),
    );
  }
  // Only what is on screen keeps a live picture in the webview.
  for (const [id, v] of live.viewers) v.setVisible(state.activeTab === id);
  for (const v of live.thumbs.values()) v.setVisible(state.activeTab === "overview");
  return el("section", { class: "computer" }, tabs, body);
}

export function screenBar(v: Viewer): HTMLElement {
  const mode = el("span", { class: "mode " + (v.control ? "control" : "view"), id: "screen-mode" }, v.control ? "You have control" : "View only");
  const bar = el("div", { class: "screen-bar" }, mode);
  if (v.control) {
    bar.append(
      button("Send clipboard", { class: "ghost" }, async () => {
        const text = await navigator.clipboard?.readText().catch(() => "");
        if (text) v.sendClipboard(text);
      }),
      button(
        v.botClipboardWaiting ? "Copy from bot •" : "Copy from bot",
        {
          class: "ghost" + (v.botClipboardWaiting ? " waiting" : ""),
          id: "copy-bot-clipboard",
          title: v.botClipboardWaiting
            ? "The bot copied something: put it on your clipboard (Ctrl+C on its screen does this at once)"
            : "Put the bot's clipboard on yours (Ctrl+C on its screen does this at once)",
        },
        () => copyBotClipboard(v),
      ),
    );
  }
  const tools = el("span", { class: "screen-tools" });
  tools.append(
    button(
      v.actualSize ? "Fit to window" : "Actual size",
      { class: "ghost", id: "screen-scale", title: v.actualSize ? "Scale the screen to fit" : "One screen pixel on one pixel of yours; scroll to see the rest" },
      () => setActualSize(v, !v.actualSize),
    ),
  );
  if (!SOLO) {
    tools.append(
      button(
        state.focus ? "Exit focus" : "Focus",
        { class: "ghost", id: "screen-focus", title: state.focus ? "Back to the chat and the dock (Esc)" : "Only the screen, as large as the window allows (Esc returns)" },
        () => setFocus(!state.focus),
      ),
      button("Own window", { class: "ghost", id: "screen-window", title: "Open this screen in a window of its own" }, () => openScreenWindow(v.bot)),
    );
  }
  bar.append(tools);
  return bar;
}

/** Draws the active screen's bar again (its connection or control changed). */
export function renderScreenBar() {
  const v = live.viewers.get(state.activeTab);
  const bar = document.querySelector(".screen-bar");
  if (v && bar) bar.replaceWith(screenBar(v));
}

function overview(): HTMLElement {
  const grid = el("div", { class: "overview" });
  if (state.tabs.length === 0) grid.append(el("p", { class: "muted" }, "Open a bot's desktop to watch it here; every open screen shows live."));
  for (const id of state.tabs) {
    const t = live.thumbs.get(id);
    if (!t) continue;
    const cell = el("figure", { class: "thumb", "data-bot": id }, t.el, el("figcaption", {}, bot(id)?.name ?? id));
    cell.addEventListener("click", () => showTab(id));
    grid.append(cell);
  }
  return grid;
}

/** Esc leaves focus mode (before the screen would pass it to the bot). */
export function installFocusKeys() {
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
}
