// Quitting: closing the window (or Ctrl+Q) first says what keeps running once the app is gone,
// the bots' computers and the spare, and offers to suspend them now. Left running, each is
// suspended by its idle rule anyway (a small watcher the app leaves behind applies it).
import { api, errorMessage } from "../api";
import { button, el } from "../dom";
import { state } from "../store";
import { modal } from "./settings";

export function installQuit() {
  api.onQuitRequested(() => void askQuit());
  window.addEventListener("keydown", (e) => {
    // Keys typed into a bot's screen are the bot's (its own Ctrl+Q closes its browser).
    if (state.focus || !e.ctrlKey || e.key.toLowerCase() !== "q") return;
    e.preventDefault();
    void askQuit();
  });
}

async function askQuit() {
  let left;
  try {
    left = await api.leftRunning();
  } catch {
    return api.quit(false);
  }
  if (!left.computers.length && !left.spares) return api.quit(false);
  const m = left.idle_minutes;
  const minutes = m < 1 ? `${Math.round(m * 60)} seconds` : m === 1 ? "1 minute" : `${m} minutes`;
  const items = left.computers.map((c) =>
    el("li", { "data-computer": c.id }, el("strong", {}, c.bots.length ? c.bots.join(", ") : c.name), el("span", { class: "muted" }, c.working ? " · working now: quitting stops its run" : ` · computer ${c.name}`)),
  );
  if (left.spares) items.push(el("li", { class: "muted" }, left.spares === 1 ? "the spare computer, kept ready for a new bot" : `${left.spares} spare computers`));
  const error = el("p", { class: "error", role: "alert" });
  const choose = (suspend: boolean) => async () => {
    error.textContent = suspend ? "Saving and suspending…" : "";
    try {
      await api.quit(suspend);
    } catch (e) {
      error.textContent = errorMessage(e);
    }
  };
  const box = modal(
    "Quit Botdesk?",
    el("p", {}, "These keep running after Botdesk quits:"),
    el("ul", { class: "quit-list", id: "quit-list" }, ...items),
    el("p", { class: "muted" }, `A running computer uses memory. Left running, each is saved and suspended after ${minutes} unused, even with Botdesk closed; a bot's next task wakes it.`),
    error,
    el(
      "div",
      { class: "row" },
      button("Cancel", { id: "quit-cancel" }, () => (document.getElementById("modal")!.hidden = true)),
      button(`Quit, suspend after ${minutes}`, { id: "quit-leave" }, choose(false)),
      button("Suspend them and quit", { class: "primary", id: "quit-suspend" }, choose(true)),
    ),
  );
  (box.querySelector("#quit-suspend") as HTMLElement).focus();
}
