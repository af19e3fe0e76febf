// The selected bot: its header with control, a notice, and the workspace (chat, screens, dock);
// in a screen's own window, only the bar and the screen.
import { CHAT_WIDTH, dismissNotice, release, setChatWidth, stop, switchComputer, takeControl } from "../actions";
import { $, button, el } from "../dom";
import { initials, statusText } from "../format";
import { bot, live, SOLO, state } from "../store";
import type { BotRow } from "../types";
import { api, errorMessage } from "../api";
import { chat } from "./chat";
import { firstRun } from "./firstrun";
import { modelsSection } from "./settings";
import { computer, screenBar } from "./computer";
import { dock } from "./dock";

export function renderMain() {
  const main = $("main");
  const b = bot(state.selected);
  if (!b) {
    main.replaceChildren(
      state.bots.length
        ? el("div", { class: "empty-state" }, el("h1", {}, "Pick a bot"), el("p", {}, "Choose a bot on the left to see its chat, its screen and its files."))
        : welcome(),
    );
    return;
  }
  // Drawing anew moves the live viewer into the new layout; the keyboard stays where it was.
  const focused = document.activeElement;
  $("app").classList.toggle("focus", state.focus && live.viewers.has(state.activeTab));
  if (SOLO) main.replaceChildren(soloBar(b), controlNotice(b), soloScreen(b));
  else main.replaceChildren(header(b), controlNotice(b), el("div", { class: "workspace" }, chat(b), chatEdge(), computer(b)), dock(b));
  if (focused instanceof HTMLElement && focused !== document.activeElement && focused.isConnected) focused.focus();
  // What was drawn anew (a field, a button, a screen's tab) keeps the keyboard too: a redraw
  // while someone works by keyboard must not drop it.
  const again = focused instanceof HTMLElement && !focused.isConnected ? redrawn(focused) : null;
  if (again) {
    again.focus();
    if (again instanceof HTMLInputElement) again.setSelectionRange(again.value.length, again.value.length);
  }
}

/** The element drawn in place of `old`: the one with its id, or the tab of the same screen. */
function redrawn(old: HTMLElement): HTMLElement | null {
  if (old.id) return document.getElementById(old.id);
  if (old.dataset.tab) return document.querySelector<HTMLElement>(`.tab[data-tab="${CSS.escape(old.dataset.tab)}"]`);
  return null;
}

/** The bar of a screen in its own window: the bot, its state, and control. */
function soloBar(b: BotRow): HTMLElement {
  document.title = `${b.name} — Botdesk`;
  return el("header", { class: "bot-header solo-bar" }, el("span", { class: "avatar" }, initials(b.name)), el("h1", {}, b.name), el("span", { class: `pill ${b.status}`, id: "bot-status" }, statusText(b)), controlActions(b));
}

function soloScreen(b: BotRow): HTMLElement {
  const body = el("div", { class: "tab-body" });
  const v = live.viewers.get(b.id);
  if (v) {
    body.append(screenBar(v), v.el);
    v.setVisible(true);
  } else body.append(el("div", { class: "open-card" }, el("p", {}, `Opening ${b.name}'s screen…`)));
  return el("section", { class: "computer" }, body);
}

function header(b: BotRow): HTMLElement {
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
        b.computer.host === "local" ? "" : `on host ${b.computer.host} · `,
        button(
          b.computer.scope === "team" ? "Move to a Private computer" : "Move to the Team computer",
          { class: "inline-link", id: "switch-computer", title: "Both homes are kept. The bot's files and browser logins come along; nothing newer is overwritten." },
          () => switchComputer(b),
        ),
      ),
    ),
    el("span", { class: `pill ${b.status}`, id: "bot-status" }, statusText(b)),
    controlActions(b),
  );
}

/** Stop, Take control (pausing a running bot) or Release with a note for the bot. */
function controlActions(b: BotRow): HTMLElement {
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

function controlNotice(b: BotRow): HTMLElement {
  const e = state.controlError;
  const box = el("div", { class: "notice", id: "control-notice" });
  const moved = state.switched;
  if ((!e || e.bot !== b.id) && moved?.bot === b.id) {
    box.classList.add("info");
    box.append(el("span", { id: "switch-note" }, moved.text), button("Dismiss", { class: "ghost" }, () => dismissNotice("switched")));
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
  box.append(button("Dismiss", { class: "ghost" }, () => dismissNotice("error")));
  return box;
}

/** The first page, before any bot: what is set up and what is next, each step with its state and
 *  the way to do it (Docker, the computer image, a model with its Test, the first bot). */
/** The chat's right edge: dragged, or moved with the arrow keys, it sets the chat's width (the
 *  screen takes the rest); the width is remembered. */
function chatEdge(): HTMLElement {
  const edge = el("div", {
    class: "chat-edge",
    id: "chat-edge",
    role: "separator",
    tabindex: "0",
    "aria-orientation": "vertical",
    "aria-label": "Chat width",
    "aria-valuemin": String(CHAT_WIDTH.min),
    "aria-valuemax": String(CHAT_WIDTH.max),
    "aria-valuenow": String(state.chatWidth),
    title: "Drag to widen the chat or the screen",
  });
  const set = (px: number) => {
    setChatWidth(px);
    edge.setAttribute("aria-valuenow", String(state.chatWidth));
  };
  edge.addEventListener("pointerdown", (e) => {
    const start = e.clientX - state.chatWidth;
    edge.setPointerCapture(e.pointerId);
    const move = (m: PointerEvent) => set(m.clientX - start);
    edge.addEventListener("pointermove", move);
    edge.addEventListener("pointerup", () => edge.removeEventListener("pointermove", move), { once: true });
  });
  edge.addEventListener("keydown", (e) => {
    if (e.key === "ArrowLeft" || e.key === "ArrowRight") {
      e.preventDefault();
      set(state.chatWidth + (e.key === "ArrowLeft" ? -20 : 20));
    }
  });
  return edge;
}

function welcome(): HTMLElement {
  const check = (name: string) => state.health?.checks.find((c) => c.name === name);
  const step = (id: string, title: string, ok: boolean | null, ...body: (Node | string)[]) =>
    el("li", { class: "step " + (ok === null ? "" : ok ? "done" : "todo"), id }, el("h3", {}, (ok ? "✓ " : "") + title), ...body);
  const docker = check("docker");
  const image = check("image");
  // The models with their Test buttons and the form to add one, right here; the step turns done
  // when one is added (the section says so with `botdesk-models-changed`).
  const models = el("div", { class: "welcome-models" }, el("p", { class: "muted" }, "Your bots think with a model of yours: Anthropic, OpenAI, or one you run (Ollama, vLLM). Add it, then Test it."));
  const modelStep = step("welcome-model", "A model", null, models);
  // Done with a model whose last Test (if any) did not fail.
  const mark = (section: HTMLElement, n: number) => {
    const ok = n > 0 && !section.querySelector(".model-check.error");
    modelStep.className = "step " + (ok ? "done" : "todo");
    modelStep.querySelector("h3")!.textContent = (ok ? "✓ " : "") + "A model";
  };
  modelsSection("welcome-")
    .then(async (section) => {
      models.append(section);
      const again = () => api.listModels().then((l) => mark(section, l.length));
      await again();
      section.addEventListener("botdesk-models-changed", again);
      section.addEventListener("botdesk-model-checked", again);
    })
    .catch((e) => models.replaceChildren(errorMessage(e)));
  return el(
    "div",
    { class: "empty-state welcome" },
    el("h1", {}, "Welcome to Botdesk"),
    el("p", {}, "Each bot gets its own Linux desktop, browser and workspace folder on this laptop. Four steps to the first one:"),
    el(
      "ol",
      { class: "checklist" },
      step("welcome-docker", "Docker", docker ? docker.ok : null, el("div", { class: "muted" }, docker ? (docker.ok ? docker.detail : `${docker.detail} Fix: ${docker.fix ?? ""}`) : "Checking…")),
      step(
        "welcome-image",
        "The computer image",
        image ? image.ok : null,
        el("div", { class: "muted" }, image?.detail ?? "Checking…"),
        ...(image && !image.ok && state.health ? [button("Build it…", { class: "primary small", id: "welcome-build" }, () => firstRun(state.health!))] : []),
      ),
      modelStep,
      step("welcome-bot", "Your first bot", null, el("div", { class: "muted" }, "Give it a name; its chat then suggests tasks to start from. "), button("Create a bot", { class: "small", id: "welcome-new-bot" }, () => $("new-bot").click())),
    ),
  );
}
