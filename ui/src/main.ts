// The app's window: wires the engine's events into the store and draws what changed.
//   store.ts    the one store, and how events change it (no backend calls, no drawing)
//   actions.ts  what the person does: calls the backend, updates the store
//   screens/    what is drawn from the store: sidebar, bot (header, control), chat, computer
//               (screen tabs), dock (terminal, files, browser), settings, first run
import { afterBotsChanged, afterRunEvent, filesChanged, openDesktop, refresh, restoreLayout, select } from "./actions";
import { api } from "./api";
import { $ } from "./dom";
import { applyBots, applyRunEvent, changed, onChange, SOLO, state } from "./store";
import { renderMain } from "./screens/bot";
import { renderChat, renderLiveReply } from "./screens/chat";
import { installFocusKeys, renderScreenBar } from "./screens/computer";
import { renderDock } from "./screens/dock";
import { firstRun } from "./screens/firstrun";
import { openSettings } from "./screens/settings";
import { renderBots, renderHealth, setupNewBot } from "./screens/sidebar";
import { installUnlock } from "./screens/unlock";
import { installQuit } from "./screens/quit";

/** Draws each changed part once; a part inside a larger one that is drawn anew is not drawn again. */
onChange((parts) => {
  if (parts.has("bots") && !SOLO) renderBots();
  if (parts.has("health") && !SOLO) renderHealth();
  // The first page shows the set-up's state.
  if (parts.has("main") || (parts.has("health") && !SOLO && !state.bots.length)) return renderMain();
  // A screen's own window shows neither the chat nor the dock.
  if (SOLO) {
    if (parts.has("screen-bar")) renderScreenBar();
    return;
  }
  // The smaller parts fall back to the whole when they are not on the page.
  const drawn = (parts.has("chat") ? renderChat() : true) && (parts.has("dock") ? renderDock() : true);
  if (!drawn) return renderMain();
  if (parts.has("live-reply") && !parts.has("chat")) renderLiveReply();
  if (parts.has("screen-bar")) renderScreenBar();
});

/** The engine's events are applied as they come: the bots with their states, run events, files. */
function follow() {
  let events = 0;
  api.onBotsChanged((list) => {
    (window as any).__botdesk.botsChanged = `${++events} events, list ${list.seq}`; // the app tests read it
    afterBotsChanged(applyBots(list));
  });
  api.onRunEvent((e) => {
    applyRunEvent(e);
    afterRunEvent(e);
  });
  api.onFilesChanged(filesChanged);
  // A click on a desktop notification opens its bot.
  if (!SOLO) api.onOpenBot((id) => select(id));
}

/** A screen in its own window: that bot's screen and control only. */
async function startSolo(id: string) {
  $("app").classList.add("solo");
  state.selected = id;
  // Events are followed before the first read, so none is missed between the two.
  follow();
  await refresh();
  changed("main");
  openDesktop(id);
}

async function start() {
  setupNewBot();
  installQuit();
  installFocusKeys();
  $("open-settings").addEventListener("click", openSettings);
  changed("health");
  // The layout as the person left it (the dock's pane), per data directory.
  await restoreLayout();
  // Events are followed before the first read, so none is missed between the two.
  follow();
  await refresh();
  changed("bots", "main");
  await api.uiReady(state.bots.length);
  api.doctor().then((r) => {
    state.health = r;
    changed("health");
    if (!r.checks.every((c) => c.ok || c.name === "keyring")) firstRun(r);
  });
}

installUnlock();
if (SOLO) startSolo(SOLO);
else start();
