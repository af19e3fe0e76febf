// The chat column: the bot's messages with their tool calls and screenshots, the streamed reply,
// what its runs cost, and the task box.
import { answerQuestion, sendTask, undoRun } from "../actions";
import { button, el } from "../dom";
import { shortTokens, usageText } from "../format";
import { bot, state } from "../store";
import type { BotRow, ChatCall, ChatItem, Question, RunFailure } from "../types";
import { openReplay, openRuns } from "./replay";
import { modal, openApprovals, openBot, openBudget, openLogins, openMcpServers, openNetwork, openSettings } from "./settings";

/** What the bot's run asks the person (something its approvals name, or a safety check its model's
 *  provider put on an action), with Allow once, Always for this site (approvals of a site) and
 *  Decline; nothing answers for them. */
function question(b: BotRow, q: Question): HTMLElement {
  const approval = q.kind !== "safety_check";
  const perSite = ["download", "upload", "form", "page"].includes(q.kind);
  const no = approval ? "Deny" : "Decline";
  const note = el("input", { type: "text", id: "question-note", placeholder: `Note for ${b.name} (with ${no})`, "aria-label": `Note to the bot with ${no}` }) as HTMLInputElement;
  // Kept while the chat redraws (events keep coming while the person types).
  note.value = questionNotes.get(q.id) ?? "";
  note.addEventListener("input", () => questionNotes.set(q.id, note.value));
  return el(
    "div",
    { class: "msg needs-you question", role: "alert", id: "question" },
    el("div", { class: "text" }, approval ? q.question : `${b.name} asks you: ${q.question}`),
    note,
    el(
      "div",
      { class: "row" },
      button(approval ? "Allow once" : "Allow", { class: "primary", id: "question-allow", type: "button" }, () => answerQuestion(b.id, "allow", null)),
      perSite ? button("Always for this site", { id: "question-always", type: "button" }, () => answerQuestion(b.id, "always", null)) : "",
      button(no, { id: "question-deny", type: "button" }, () => answerQuestion(b.id, "deny", note.value.trim() || null)),
    ),
  );
}

/** Tasks a new bot's chat offers to start from. */
const EXAMPLES = [
  "Open example.org in your browser and tell me what the page says.",
  "Look at your desktop and describe what you see.",
  "Write a short report of the files in your folder to report.md.",
];

/** The note the person is writing to each question, by its id. */
const questionNotes = new Map<number, string>();
/** Whether the chat's Settings menu is open (kept while the chat redraws). */
let menuOpen = false;

export function chat(b: BotRow): HTMLElement {
  const list = el("div", { class: "messages", id: "messages", "aria-live": "polite" });
  const items = state.chats.get(b.id);
  if (!items) {
    list.append(el("p", { class: "muted" }, "Loading the chat…"));
  } else if (items.length === 0) {
    list.append(
      b.model
        ? el(
            "div",
            { class: "muted examples", id: "example-tasks" },
            el("p", {}, `Give ${b.name} a task below. Its replies, tool calls and screenshots appear here as it works. To start from:`),
            ...EXAMPLES.map((task) =>
              button(task, { class: "ghost small example", type: "button" }, () => {
                state.drafts.set(b.id, task);
                const input = document.getElementById("task-input") as HTMLTextAreaElement | null;
                if (input) {
                  input.value = task;
                  input.focus();
                }
              }),
            ),
          )
        : el("p", { class: "muted", id: "no-model" }, `${b.name} has no model yet. `, button("Give it a model…", { class: "ghost small", id: "give-model" }, () => openBot(b))),
    );
  }
  for (const m of items ?? []) list.append(message(m));
  const live = state.live.get(b.id);
  if (live) list.append(el("div", { class: "msg assistant streaming", id: "live-reply" }, live));
  // Said until the next thing the run does (the call after the wait).
  const waiting = state.waiting.get(b.id);
  if (waiting) {
    const left = Math.round((waiting.until - Date.now()) / 1000);
    list.append(el("div", { class: "msg system waiting", id: "waiting-note" }, left >= 1 ? `Waiting for ${waiting.why}, ${left} s…` : `Waiting for ${waiting.why}…`));
  }
  const q = state.questions.get(b.id);
  // A question stays in view above the composer, whatever the chat's length.
  const asking = q ? question(b, q) : null;
  if (!q && b.status === "waiting_for_you" && b.run !== "asks_you") list.append(el("div", { class: "msg needs-you" }, "The bot needs you. Take control of its screen, do what it asked, then press Release."));

  const input = el("textarea", { id: "task-input", rows: "2", placeholder: b.model ? `Tell ${b.name} what to do…` : "Choose a model first", "aria-label": "Task" }) as HTMLTextAreaElement;
  input.value = state.drafts.get(b.id) ?? "";
  input.disabled = !b.model;
  input.addEventListener("input", () => state.drafts.set(b.id, input.value));
  const send = () => {
    const task = input.value.trim();
    if (task) sendTask(b.id, task);
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
  const runs = button("Runs…", { class: "ghost small", id: "open-runs", title: "This bot's runs, each with its replay" }, () => openRuns(b.id, b.name));
  const network = button("Network…", { class: "ghost small", id: "edit-network", title: "Where this bot may connect" }, () => openNetwork(b));
  const approvals = button("Approvals…", { class: "ghost small", id: "edit-approvals", title: "What this bot must ask you before doing" }, () => openApprovals(b));
  const logins = button("Logins…", { class: "ghost small", id: "edit-logins", title: "Logins this bot may use without seeing them" }, () => openLogins(b));
  const servers = button("MCP servers…", { class: "ghost small", id: "edit-mcp", title: "MCP servers this bot's runs start in its computer" }, () => openMcpServers(b));
  // The bot's settings, in a menu: the head stays one line and the chat keeps its room.
  const rename = button("Name and model…", { class: "ghost small", id: "edit-bot", title: "This bot's name and model" }, () => openBot(b));
  const entries = [rename, budget, network, approvals, logins, servers];
  const menu = el("details", { class: "bot-menu", id: "bot-menu" }, el("summary", { title: "This bot's budget, network, approvals, logins and MCP servers" }, "Settings ▾"), el("div", { class: "menu-items" }, ...entries)) as HTMLDetailsElement;
  menu.open = menuOpen;
  menu.addEventListener("toggle", () => (menuOpen = menu.open));
  for (const entry of entries) entry.addEventListener("click", () => ((menuOpen = false), (menu.open = false)));
  const section = el("section", { class: "chat", "aria-label": "Chat" }, el("div", { class: "chat-head" }, el("h2", {}, `Chat · ${b.model ?? "no model"}`, spent), el("div", { class: "head-buttons" }, runs, menu)), list);
  if (asking) section.append(asking);
  if (err) section.append(el("p", { class: "error send-error" }, err));
  section.append(composer);
  requestAnimationFrame(() => (list.scrollTop = list.scrollHeight));
  return section;
}

function message(m: ChatItem): HTMLElement {
  const box = el("div", { class: `msg ${m.role}`, "data-message": String(m.id) });
  if (m.text) box.append(el("div", { class: "text" }, m.text));
  for (const c of m.calls) box.append(toolCall(c));
  if (m.usage) {
    const replay = button("Replay", { class: "ghost small", "data-replay-run": m.run_id, title: "Watch what the bot did in this run: its screen, each action where it happened, and your turns" }, () => openReplay(state.selected ?? "", m.run_id));
    box.append(el("div", { class: "usage", title: "What this run's model calls cost so far" }, usageText(m.usage, m.cost_usd)), el("div", { class: "row replay-run" }, replay));
  }
  const fix = m.failure && failureFix(m.failure);
  if (fix) box.append(el("div", { class: "row failure-fix", "data-failure": m.failure! }, fix));
  if (m.files_changed) {
    const done = state.undone.get(m.run_id);
    const n = m.files_changed === 1 ? "1 file" : `${m.files_changed} files`;
    box.append(
      done
        ? el("div", { class: "muted undone" }, done)
        : el(
            "div",
            { class: "row undo-run" },
            button("Undo file changes", { class: "small", "data-undo-run": m.run_id, title: `This run wrote or removed ${n} in the bot's folder. Undo puts the folder back as it was before the run; what it is now is kept as a version.` }, () =>
              undoRun(state.selected ?? "", m.run_id),
            ),
            el("span", { class: "muted" }, `${n} changed`),
          ),
    );
  }
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
  const shot = c.image ? state.shots.get(c.image) : null;
  if (shot) {
    const img = el("img", { class: "thumb", alt: `Screenshot after ${c.name}`, title: "Screenshot (click to enlarge)", src: shot });
    img.addEventListener("click", () => modal("Screenshot", el("img", { class: "full-shot", src: shot, alt: "Screenshot" })));
    wrap.append(img);
  }
  return wrap;
}

/** Draws only the chat column again, keeping the person's typing and focus where they type (the
 *  task box, a question's note). */
export function renderChat(): boolean {
  const b = bot(state.selected);
  const old = document.querySelector("section.chat");
  if (!b || !old) return false;
  const active = document.activeElement;
  const typing = (active instanceof HTMLInputElement || active instanceof HTMLTextAreaElement) && active.id && old.contains(active) ? active : null;
  const [start, end] = typing ? [typing.selectionStart, typing.selectionEnd] : [0, 0];
  old.replaceWith(chat(b));
  const again = typing ? document.getElementById(typing.id) : null;
  if (again instanceof HTMLInputElement || again instanceof HTMLTextAreaElement) {
    again.focus();
    again.setSelectionRange(start, end);
  }
  return true;
}

/** The streamed reply alone (many times a second while the model writes). */
export function renderLiveReply(): boolean {
  const text = state.live.get(state.selected ?? "");
  const live = document.getElementById("live-reply");
  if (!live || !text) return renderChat();
  live.textContent = text;
  const list = document.getElementById("messages");
  if (list) list.scrollTop = list.scrollHeight;
  return true;
}
