// The sidebar: the bots with their states, the new-bot form, and the health of the set-up.
import { api, errorMessage } from "../api";
import { createBot, select } from "../actions";
import { $, el } from "../dom";
import { initials, statusText } from "../format";
import { state } from "../store";
import type { ComputerScope } from "../types";
import { firstRun } from "./firstrun";
import { openSettings } from "./settings";

export function renderBots() {
  const list = $("bot-list");
  list.replaceChildren();
  if (state.botsError) {
    list.append(el("li", { class: "error" }, state.botsError));
    return;
  }
  if (state.bots.length === 0) list.append(el("li", { class: "empty" }, "No bots yet. Press + to create one."));
  for (const b of state.bots) {
    const item = el(
      "li",
      { class: "bot" + (b.id === state.selected ? " selected" : ""), "data-bot": b.id, "data-status": b.status, tabindex: "0", role: "button", "aria-label": `${b.name}: ${statusText(b)}`, "aria-current": String(b.id === state.selected) },
      el("span", { class: "avatar" }, initials(b.name)),
      el("span", { class: "bot-text" }, el("span", { class: "bot-name" }, b.name), el("span", { class: "bot-sub" }, statusText(b))),
      el("span", { class: `status ${b.status}`, title: statusText(b) }),
    );
    item.addEventListener("click", () => select(b.id));
    item.addEventListener("keydown", (e) => (e as KeyboardEvent).key === "Enter" && select(b.id));
    list.append(item);
  }
}

export function renderHealth() {
  const footer = $("health");
  const report = state.health;
  if (!report) {
    footer.replaceChildren(el("span", { class: "muted" }, "Checking Docker…"));
    return;
  }
  const names: Record<string, string> = { docker: "Docker", image: "Computer image", image_age: "Image freshness", keyring: "Keyring" };
  footer.replaceChildren(
    ...report.checks
      .filter((c) => c.name in names)
      .map((c) => {
        const check = el(
          "div",
          { class: "check " + (!c.ok ? "bad" : c.warn ? "warn" : "ok"), title: c.fix ? `${c.detail}\nFix: ${c.fix}` : c.detail },
          el("span", { class: "dot" }),
          names[c.name]!,
        );
        // What needs seeing to opens the set-up steps.
        if (!c.ok || c.warn) check.addEventListener("click", () => firstRun(report));
        return check;
      }),
  );
}

/** The new-bot form of index.html: a name, a model, Team or Private, and (once hosts on other
 *  machines were added) the Docker host its computer runs on. */
export function setupNewBot() {
  const form = $<HTMLFormElement>("new-bot-form");
  const name = $<HTMLInputElement>("new-bot-name");
  const error = $("new-bot-error");
  const model = $<HTMLSelectElement>("new-bot-model");
  const host = $<HTMLSelectElement>("new-bot-host");
  const noModel = $("new-bot-no-model");
  const create = form.querySelector("button[type=submit]") as HTMLButtonElement;
  $("new-bot-add-model").addEventListener("click", () => openSettings());
  /** The models to pick from, read again while the form is open: one added in Settings or with
   *  the CLI shows up, and without one the form says so and cannot create. */
  const fillModels = async () => {
    const models = await api.listModels().catch(() => []);
    const chosen = model.value;
    model.replaceChildren(...(models.length ? models.map((m) => el("option", { value: m.id }, `${m.id} (${m.model})`)) : [el("option", { value: "" }, "No model yet")]));
    if (models.some((m) => m.id === chosen)) model.value = chosen;
    model.disabled = create.disabled = models.length === 0;
    noModel.hidden = models.length > 0;
  };
  let following: number | undefined;
  document.addEventListener("botdesk-models-changed", () => !form.hidden && fillModels());
  const open = async (show: boolean) => {
    form.hidden = !show;
    error.hidden = true;
    window.clearInterval(following);
    if (!show) return;
    name.focus();
    following = window.setInterval(fillModels, 3000);
    const [, hosts] = await Promise.all([fillModels(), api.listHosts().catch(() => [])]);
    host.hidden = hosts.length < 2;
    host.replaceChildren(
      ...hosts.map((h) => el("option", { value: h.name }, h.name === "local" ? "On this machine" : `On host ${h.name} (${h.url.replace("tcp://", "")})`)),
    );
  };
  $("new-bot").addEventListener("click", () => open(form.hidden));
  $("new-bot-cancel").addEventListener("click", () => open(false));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const scope = (form.querySelector("input[name=scope]:checked") as HTMLInputElement).value as ComputerScope;
    try {
      await createBot(name.value.trim(), scope, model.value || null, host.value || "local");
      name.value = "";
      open(false);
    } catch (err) {
      error.textContent = errorMessage(err);
      error.hidden = false;
    }
  });
}
