import { api, BotView, DoctorReport, errorMessage, Scope } from "./api";

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;

const state = {
  bots: [] as BotView[],
  selected: null as string | null,
  health: null as DoctorReport | null,
};

function el(tag: string, attrs: Record<string, string> = {}, ...children: (Node | string)[]): HTMLElement {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  for (const c of children) e.append(c);
  return e;
}

function initials(name: string): string {
  return name
    .split(/[\s._-]+/)
    .filter(Boolean)
    .slice(0, 2)
    .map((w) => w[0]!.toUpperCase())
    .join("");
}

function renderBots() {
  const list = $("bot-list");
  list.replaceChildren();
  if (state.bots.length === 0) {
    list.append(el("li", { class: "empty" }, "No bots yet. Press + to create one."));
  }
  for (const bot of state.bots) {
    const item = el(
      "li",
      { class: "bot" + (bot.id === state.selected ? " selected" : ""), "data-bot": bot.id, tabindex: "0" },
      el("span", { class: "avatar" }, initials(bot.name)),
      el("span", { class: "bot-text" }, el("span", { class: "bot-name" }, bot.name), el("span", { class: "bot-sub" }, bot.computer.scope === "team" ? "Team computer" : "Private computer")),
      el("span", { class: "status idle", title: "Idle" }),
    );
    item.addEventListener("click", () => select(bot.id));
    item.addEventListener("keydown", (e) => (e as KeyboardEvent).key === "Enter" && select(bot.id));
    list.append(item);
  }
}

function renderMain() {
  const main = $("main");
  const bot = state.bots.find((b) => b.id === state.selected);
  if (!bot) {
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
  main.replaceChildren(
    el(
      "header",
      { class: "bot-header" },
      el("span", { class: "avatar large" }, initials(bot.name)),
      el("div", {}, el("h1", {}, bot.name), el("p", { class: "muted" }, `${bot.computer.scope === "team" ? "Team" : "Private"} computer ${bot.computer.name} · folder ${bot.folder}`)),
    ),
    el(
      "section",
      { class: "card" },
      el("h2", {}, "Details"),
      el(
        "dl",
        {},
        el("dt", {}, "Bot id"),
        el("dd", {}, bot.id),
        el("dt", {}, "Model"),
        el("dd", {}, bot.model ?? "not chosen yet"),
        el("dt", {}, "Instructions"),
        el("dd", {}, bot.instructions || "none"),
      ),
    ),
  );
}

function renderHealth() {
  const footer = $("health");
  const report = state.health;
  if (!report) {
    footer.replaceChildren(el("span", { class: "muted" }, "Checking Docker…"));
    return;
  }
  const pick = ["docker", "image", "keyring"];
  footer.replaceChildren(
    ...report.checks
      .filter((c) => pick.includes(c.name))
      .map((c) => el("div", { class: "check " + (c.ok ? "ok" : "bad"), title: c.ok ? c.detail : `${c.detail}\nFix: ${c.fix ?? ""}` }, el("span", { class: "dot" }), c.name === "image" ? "Computer image" : c.name === "docker" ? "Docker" : "Keyring")),
  );
}

function select(id: string) {
  state.selected = id;
  renderBots();
  renderMain();
}

async function refresh() {
  try {
    const bots = await api.listBots();
    const changed = JSON.stringify(bots) !== JSON.stringify(state.bots);
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

function setupNewBot() {
  const form = $<HTMLFormElement>("new-bot-form");
  const name = $<HTMLInputElement>("new-bot-name");
  const error = $("new-bot-error");
  const open = (show: boolean) => {
    form.hidden = !show;
    error.hidden = true;
    if (show) name.focus();
  };
  $("new-bot").addEventListener("click", () => open(form.hidden));
  $("new-bot-cancel").addEventListener("click", () => open(false));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const scope = (form.querySelector("input[name=scope]:checked") as HTMLInputElement).value as Scope;
    try {
      const bot = await api.createBot(name.value.trim(), scope);
      name.value = "";
      open(false);
      await refresh();
      select(bot.id);
    } catch (err) {
      error.textContent = errorMessage(err);
      error.hidden = false;
    }
  });
}

async function start() {
  setupNewBot();
  renderHealth();
  await refresh();
  renderBots();
  renderMain();
  await api.uiReady(state.bots.length);
  api.doctor().then((r) => {
    state.health = r;
    renderHealth();
  });
  // The CLI may change the same data directory at any time: pick that up.
  setInterval(refresh, 2000);
  window.addEventListener("focus", refresh);
}

start();
