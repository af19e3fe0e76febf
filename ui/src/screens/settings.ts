// The modal windows: Settings (computers, data, models with their prices and limits) and a bot's
// budget. They keep their own form state, read what they show when they open, and save through
// the api on submit.
import { api, errorMessage } from "../api";
import { loadSpend, refresh } from "../actions";
import { $, button, el } from "../dom";
import { usageText } from "../format";
import type { Approvals, BotRow, CoordSpace, Limits, ModelKind, ModelRow, NetPolicy, Prices } from "../types";

export function modal(title: string, ...body: Node[]): HTMLElement {
  const root = $("modal");
  const close = button("×", { class: "modal-close", "aria-label": "Close" }, () => (root.hidden = true));
  const box = el("div", { class: "modal", role: "dialog", "aria-label": title }, el("header", {}, el("h2", {}, title), close), ...body);
  root.replaceChildren(box);
  root.hidden = false;
  return box;
}

export async function openSettings() {
  const view = await api.getSettings();
  const s = view.settings;
  const field = (label: string, input: HTMLElement, hint: string) => el("label", { class: "field" }, el("span", {}, label), input, el("small", {}, hint));
  const mem = el("input", { type: "number", min: "512", max: "65536", step: "256", value: String(s.memory_mib), id: "set-memory" }) as HTMLInputElement;
  const cpus = el("input", { type: "number", min: "0.5", max: "64", step: "0.5", value: String(s.cpus), id: "set-cpus" }) as HTMLInputElement;
  const limit = el("input", { type: "number", min: "1", max: "16", placeholder: "no limit", value: s.screen_limit ? String(s.screen_limit) : "", id: "set-limit" }) as HTMLInputElement;
  const spare = el("input", { type: "checkbox", id: "set-spare" }) as HTMLInputElement;
  spare.checked = s.spare_computer;
  const hours = el("input", { type: "number", min: "1", max: "8760", step: "1", value: String(s.history_hours), id: "set-history-hours" }) as HTMLInputElement;
  const days = el("input", { type: "number", min: "0", max: "3650", step: "1", value: String(s.history_days), id: "set-history-days" }) as HTMLInputElement;
  const free = el("input", { type: "number", min: "0", max: "1024", step: "1", value: String(s.keep_free_gib), id: "set-keep-free" }) as HTMLInputElement;
  const record = el("input", { type: "checkbox", id: "set-record" }) as HTMLInputElement;
  record.checked = s.record_screen;
  const fps = el("input", { type: "number", min: "1", max: "30", step: "1", value: String(s.record_fps), id: "set-record-fps" }) as HTMLInputElement;
  const perRun = el("input", { type: "number", min: "16", max: "8192", step: "16", value: String(s.record_max_mib), id: "set-record-max" }) as HTMLInputElement;
  const recDays = el("input", { type: "number", min: "1", max: "3650", step: "1", value: String(s.record_days), id: "set-record-days" }) as HTMLInputElement;
  const recTotal = el("input", { type: "number", min: "1", max: "1024", step: "1", value: String(s.record_total_gib), id: "set-record-total" }) as HTMLInputElement;
  const check = (id: string, on: boolean) => {
    const box = el("input", { type: "checkbox", id }) as HTMLInputElement;
    box.checked = on;
    return box;
  };
  const [notifyAsks, notifyDone, notifyFailed] = [check("set-notify-asks", s.notify_asks), check("set-notify-finished", s.notify_finished), check("set-notify-failed", s.notify_failed)];
  const idle = el("input", { type: "number", min: "0.5", max: "1440", step: "0.5", value: String(s.idle_minutes), id: "set-idle" }) as HTMLInputElement;
  const msg = el("p", { class: "muted", id: "settings-message" });
  const form = el(
    "form",
    { class: "settings" },
    el("h3", {}, "Computers"),
    field("Memory (MiB)", mem, "Each computer's memory; applies to computers started after saving."),
    field("CPUs", cpus, "Each computer's CPU share."),
    field("Screen limit", limit, "At most this many bot desktops at once on one computer. Empty: no limit."),
    field("Suspend when unused (minutes)", idle, "A computer nobody has used this long is saved and suspended, also after the app quits; a bot's next task wakes it."),
    field("Spare computer", spare, "While the app runs, keep one computer started on this machine, so a new bot's computer is ready at once. Unused, it is an idle computer: about 40 MiB and no CPU."),
    el("h3", {}, "Versions"),
    field("Keep every version (hours)", hours, "Each checkpoint of a bot's files (after each run, at each stop) is kept this long…"),
    field("Then one a day (days)", days, "…then the newest of each day, this many days. A bot's Files → History shows them, with their size on disk."),
    field("Keep free on this disk (GiB)", free, "A checkpoint stops, keeping the version before, rather than leave less than this free where your data lives."),
    el("h3", {}, "Screen recordings"),
    field("Record runs", record, "Record a bot's screen while it works on a task and while you have its screen in the middle of one, for its replay."),
    field("Frames a second", fps, "More is smoother and takes more space."),
    field("At most per run (MiB)", perRun, "A run's recording stops here; the run goes on."),
    field("Keep (days)", recDays, "A recording is removed this many days after its run ended…"),
    field("All recordings at most (GiB)", recTotal, "…and the oldest go first once all of them take more than this."),
    el("h3", {}, "Notifications"),
    field("A bot needs you", notifyAsks, "A desktop notification when a bot asks you (to take its screen, an approval, a safety check); a click on it opens the bot."),
    field("A bot is done", notifyDone, "…when a bot's run finishes."),
    field("A run failed", notifyFailed, "…when a bot's run fails."),
    el("h3", {}, "Data"),
    el("dl", {}, el("dt", {}, "Data directory"), el("dd", {}, view.data_dir), el("dt", {}, "Computer image"), el("dd", {}, view.image)),
    el("p", { class: "muted" }, "Start the app with BOTDESK_DATA_DIR set to use another data directory."),
    el("div", { class: "row" }, el("button", { type: "submit", class: "primary" }, "Save")),
    msg,
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      await api.saveSettings({
        memory_mib: Number(mem.value),
        cpus: Number(cpus.value),
        screen_limit: limit.value ? Number(limit.value) : null,
        spare_computer: spare.checked,
        history_hours: Number(hours.value),
        history_days: Number(days.value),
        keep_free_gib: Number(free.value),
        record_screen: record.checked,
        record_fps: Number(fps.value),
        record_max_mib: Number(perRun.value),
        record_days: Number(recDays.value),
        record_total_gib: Number(recTotal.value),
        notify_asks: notifyAsks.checked,
        notify_finished: notifyDone.checked,
        notify_failed: notifyFailed.checked,
        idle_minutes: Number(idle.value),
      });
      msg.textContent = "Saved.";
      msg.className = "ok-text";
    } catch (err) {
      msg.textContent = errorMessage(err);
      msg.className = "error";
    }
  });
  // Models first: without one no bot works.
  modal("Settings", el("h3", {}, "Models"), await modelsSection(), form, el("h3", {}, "Docker hosts"), await hostsSection());
}

/** The Docker engines bots' computers can run on: this machine's, and those added with the CLI. */
async function hostsSection(): Promise<HTMLElement> {
  const hosts = await api.listHosts().catch(() => []);
  const list = el("ul", { class: "model-list host-list", id: "hosts" });
  for (const h of hosts) {
    const where = h.tls_dir ? `${h.url} · certificates in ${h.tls_dir}` : `this machine's engine (${h.url})`;
    list.append(el("li", { "data-host": h.name }, el("div", { class: "model-about" }, el("strong", {}, h.name), el("span", { class: "muted" }, ` ${where}`))));
  }
  const how = el(
    "p",
    { class: "muted" },
    "Add a Docker host on another machine with ",
    el("code", {}, "botdesk host add NAME tcp://HOST:2376 --tls-dir DIR"),
    " (mutual TLS; botdesk doctor checks it). A new bot's form then offers it; ",
    el("code", {}, "botdesk bot switch NAME private --host NAME"),
    " moves a bot there with its files.",
  );
  return el("section", { class: "hosts" }, list, how);
}

/** What each run of a bot may spend: tokens (the default when empty) and dollars (no limit when
 *  empty), with what its runs have spent so far. A run that reaches either stops with a message. */
export async function openBudget(b: BotRow) {
  const spend = await api.botSpend(b.id).catch(() => null);
  const now = spend?.budget;
  const tokens = el("input", { type: "number", min: "1", step: "1", name: "tokens", id: "budget-tokens", placeholder: "2000000 (the default)", value: now ? String(now.tokens) : "" }) as HTMLInputElement;
  const usd = el("input", { type: "number", min: "0.01", step: "any", name: "usd", id: "budget-usd", placeholder: "no dollar limit", value: now?.usd != null ? String(now.usd) : "" }) as HTMLInputElement;
  const msg = el("p", { class: "muted", id: "budget-message" }, spend ? `So far, all runs: ${usageText(spend.tokens, spend.unpriced_calls ? null : spend.usd)}.` : "");
  const form = el(
    "form",
    { class: "settings budget-form" },
    el("label", { class: "field" }, el("span", {}, "Tokens per run"), tokens, el("small", {}, "Input, cache and output tokens together. Empty: the default, 2,000,000.")),
    el("label", { class: "field" }, el("span", {}, "Dollars per run"), usd, el("small", {}, "Counted with the model's prices (Settings → Models). Empty: no dollar limit.")),
    el("button", { type: "submit", class: "primary" }, "Save budget"),
    msg,
  ) as HTMLFormElement;
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      const saved = await api.setBotBudget(b.id, tokens.value ? Number(tokens.value) : null, usd.value ? Number(usd.value) : null);
      tokens.value = String(saved.tokens);
      msg.textContent = `Saved: each run of ${b.name} may spend ${saved.tokens.toLocaleString("en-US")} tokens${saved.usd != null ? ` or $${saved.usd.toFixed(2)}` : ""}, whichever comes first.`;
      msg.className = "ok";
      await loadSpend(b.id);
    } catch (err) {
      msg.textContent = errorMessage(err);
      msg.className = "error";
    }
  });
  modal(`Budget of ${b.name}`, form);
}

/** Where a bot may connect: open, offline, or only an allowlist. */
export async function openNetwork(b: BotRow) {
  const now = await api.botNetwork(b.id).catch(() => ({ mode: "open" }) as NetPolicy);
  const choice = (mode: NetPolicy["mode"], title: string, hint: string) => {
    const input = el("input", { type: "radio", name: "net-mode", value: mode, id: `net-${mode}` }) as HTMLInputElement;
    input.checked = now.mode === mode;
    return el("label", { class: "choice", id: `net-${mode}-choice` }, input, el("span", {}, el("b", {}, title), el("small", {}, hint)));
  };
  const list = el("textarea", {
    id: "net-list",
    rows: "4",
    "aria-label": "Allowed domains and addresses",
    placeholder: "example.org\nshop.example\n192.168.1.20",
  }) as HTMLTextAreaElement;
  list.value = now.mode === "allow" ? now.allow.join("\n") : "";
  const msg = el("p", { class: "muted", id: "net-message" }, "Enforced inside the bot's computer, where the bot cannot change it; it holds within a second, for connections already open too. Each refused connection shows in the bot's activity.");
  const form = el(
    "form",
    { class: "settings network-form" },
    el(
      "fieldset",
      { class: "choices" },
      el("legend", {}, `Where ${b.name} may connect`),
      choice("open", "The internet", "Any public address; never this machine, your network, or other computers."),
      choice("allow", "Only these sites", "The domains (with their subdomains) and addresses listed below, even on your network."),
      choice("offline", "Offline", "No network at all."),
    ),
    el("label", { class: "field" }, el("span", {}, "Allowed domains and addresses"), list, el("small", {}, "One a line: example.org, 10.0.0.5 or 10.0.0.0/24.")),
    el("button", { type: "submit", class: "primary" }, "Save"),
    msg,
  ) as HTMLFormElement;
  const sync = () => (list.disabled = (form.querySelector("input[name=net-mode]:checked") as HTMLInputElement | null)?.value !== "allow");
  form.addEventListener("change", sync);
  sync();
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const mode = ((form.querySelector("input[name=net-mode]:checked") as HTMLInputElement | null)?.value ?? "open") as NetPolicy["mode"];
    try {
      const saved = await api.setBotNetwork(b.id, mode, mode === "allow" ? list.value.split(/[\s,]+/).filter(Boolean) : []);
      msg.textContent =
        saved.mode === "allow" ? `Saved: ${b.name} may connect only to ${saved.allow.join(", ")}.` : saved.mode === "offline" ? `Saved: ${b.name} is offline.` : `Saved: ${b.name} may reach the internet.`;
      msg.className = "ok";
    } catch (err) {
      msg.textContent = errorMessage(err);
      msg.className = "error";
    }
  });
  modal(`Network of ${b.name}`, form);
}

/** The bot's name and model (its next run uses the new model). */
export async function openBot(b: BotRow) {
  const models = await api.listModels().catch(() => []);
  const name = el("input", { id: "bot-name", value: b.name, required: "", "aria-label": "Name" }) as HTMLInputElement;
  const model = el(
    "select",
    { id: "bot-model", "aria-label": "Model" },
    ...(b.model ? [] : [el("option", { value: "", selected: "" }, "No model yet: choose one")]),
    ...models.map((m) => el("option", { value: m.id, ...(m.id === b.model ? { selected: "" } : {}) }, `${m.id} (${m.model})`)),
  ) as HTMLSelectElement;
  const msg = el("p", { class: "muted", id: "bot-message" }, models.length ? "A run under way keeps its model; the next one uses the new one." : "No model yet: add one in Settings → Models first.");
  const form = el(
    "form",
    { class: "settings bot-form" },
    el("label", { class: "field" }, el("span", {}, "Name"), name),
    el("label", { class: "field" }, el("span", {}, "Model"), model),
    el("button", { type: "submit", class: "primary" }, "Save"),
    msg,
  ) as HTMLFormElement;
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const newName = name.value.trim();
    try {
      const saved = await api.setBot(b.id, newName !== b.name ? newName : null, model.value && model.value !== b.model ? model.value : null);
      msg.textContent = `Saved: ${saved.name} works with ${saved.model ?? "no model"}.`;
      msg.className = "ok";
      await refresh();
    } catch (err) {
      msg.textContent = errorMessage(err);
      msg.className = "error";
    }
  });
  modal(`${b.name}'s name and model`, form);
}

/** What the bot must ask the person before doing; its runs pause at that action until answered. */
export async function openApprovals(b: BotRow) {
  const now = await api.botApprovals(b.id).catch(() => null);
  const a: Approvals = now ?? { downloads: false, uploads: false, forms: [], commands: [], spend_usd: null, new_domains: false, always: [] };
  const check = (id: string, on: boolean, title: string, hint: string) => {
    const input = el("input", { type: "checkbox", id }) as HTMLInputElement;
    input.checked = on;
    return [input, el("label", { class: "choice", for: id }, input, el("span", {}, el("b", {}, title), el("small", {}, hint)))] as const;
  };
  const [downloads, downloadsRow] = check("ask-downloads", a.downloads, "Downloads", "Before a file downloads in its browser.");
  const [uploads, uploadsRow] = check("ask-uploads", a.uploads, "Uploads", "Before a page opens a file chooser.");
  const [fresh, freshRow] = check("ask-new-domains", a.new_domains, "New sites", "Before its browser opens a page on a site you have not allowed always.");
  const lines = (id: string, label: string, values: string[], placeholder: string) => {
    const t = el("textarea", { id, rows: "3", "aria-label": label, placeholder }) as HTMLTextAreaElement;
    t.value = values.join("\n");
    return t;
  };
  const forms = lines("ask-forms", "Forms on these sites", a.forms, "shop.example\n* (every site)");
  const commands = lines("ask-commands", "Commands containing", a.commands, "git push\nrm -rf*");
  const spend = el("input", { type: "number", id: "ask-spend", min: "0", step: "0.01", placeholder: "no limit" }) as HTMLInputElement;
  spend.value = a.spend_usd === null ? "" : String(a.spend_usd);
  let always = [...a.always];
  const alwaysList = el("ul", { class: "mcp-servers", id: "ask-always" });
  const showAlways = () =>
    alwaysList.replaceChildren(
      ...(always.length
        ? always.map((entry) => el("li", {}, el("code", {}, entry), button("Forget", { class: "ghost small", type: "button" }, () => ((always = always.filter((e) => e !== entry)), showAlways()))))
        : [el("li", { class: "muted" }, "None yet: “Always for this site” answers show here.")]),
    );
  showAlways();
  const msg = el("p", { class: "muted", id: "ask-message" }, `A run of ${b.name} stops at that action and asks you here, in the chat (Allow once, Always for this site, Deny with a note the bot is told), or with botdesk approve|deny.`);
  const form = el(
    "form",
    { class: "settings network-form" },
    el("fieldset", { class: "choices" }, el("legend", {}, `${b.name} asks you before`), downloadsRow, uploadsRow, freshRow),
    el("label", { class: "field" }, el("span", {}, "Submitting a form on"), forms, el("small", {}, "One site a line (its subdomains too); * for every site.")),
    el("label", { class: "field" }, el("span", {}, "Running a command containing"), commands, el("small", {}, "One pattern a line; * stands for any characters.")),
    el("label", { class: "field" }, el("span", {}, "A run spending more than ($)"), spend, el("small", {}, "Models with prices only.")),
    el("div", { class: "field" }, el("span", {}, "Always allowed"), alwaysList),
    el("button", { type: "submit", class: "primary" }, "Save"),
    msg,
  ) as HTMLFormElement;
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const split = (t: HTMLTextAreaElement) => t.value.split("\n").map((l) => l.trim()).filter(Boolean);
    const wanted: Approvals = {
      downloads: downloads.checked,
      uploads: uploads.checked,
      new_domains: fresh.checked,
      forms: split(forms),
      commands: split(commands),
      spend_usd: spend.value.trim() === "" ? null : Number(spend.value),
      always,
    };
    try {
      await api.setBotApprovals(b.id, wanted);
      msg.textContent = `Saved: from its next action on, ${b.name} asks you first.`;
      msg.className = "ok";
    } catch (err) {
      msg.textContent = errorMessage(err);
      msg.className = "error";
    }
  });
  modal(`Approvals of ${b.name}`, form);
}

/** Logins the bot may use without seeing them: its fill_login fills them into a page on their
 *  site only. The password and seed go to the OS keyring; this window never shows them again. */
export async function openLogins(b: BotRow) {
  const list = el("ul", { class: "mcp-servers", id: "logins" });
  const msg = el("p", { class: "muted", id: "login-message" }, `${b.name} asks with its fill_login tool; the page must be on the login's site. The model never sees the password or the code.`);
  const fail = (e: unknown) => {
    msg.textContent = errorMessage(e);
    msg.className = "error";
  };
  const show = async () => {
    const logins = await api.botLogins(b.id).catch((e) => (fail(e), []));
    list.replaceChildren(
      ...(logins.length
        ? logins.map((l) =>
            el(
              "li",
              { "data-login": l.site },
              el("strong", {}, l.site),
              el("code", {}, l.username + (l.has_code ? " · one-time codes" : "")),
              button("Remove", { class: "ghost small", title: `Forget the login for ${l.site}` }, async () => {
                try {
                  await api.removeBotLogin(b.id, l.site);
                  await show();
                } catch (e) {
                  fail(e);
                }
              }),
            ),
          )
        : [el("li", { class: "muted" }, "No logins yet.")]),
    );
  };
  const site = el("input", { name: "site", id: "login-site", placeholder: "example.org or http://10.0.0.5:8080", required: "" }) as HTMLInputElement;
  const user = el("input", { name: "user", id: "login-user", placeholder: "me@example.org", required: "", autocomplete: "off" }) as HTMLInputElement;
  const password = el("input", { name: "password", id: "login-password", type: "password", required: "", autocomplete: "new-password" }) as HTMLInputElement;
  const seed = el("input", { name: "seed", id: "login-seed", type: "password", autocomplete: "off", placeholder: "optional" }) as HTMLInputElement;
  const form = el(
    "form",
    { class: "settings mcp-form" },
    el("label", { class: "field" }, el("span", {}, "Site"), site, el("small", {}, "Only a page on exactly this origin gets the login (https unless you write http://).")),
    el("label", { class: "field" }, el("span", {}, "User name"), user),
    el("label", { class: "field" }, el("span", {}, "Password"), password),
    el("label", { class: "field" }, el("span", {}, "One-time-code seed"), seed, el("small", {}, "The base32 secret of an authenticator app, for sites that ask for a code.")),
    el("button", { type: "submit", class: "primary" }, "Save login"),
    msg,
  ) as HTMLFormElement;
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      const saved = await api.addBotLogin(b.id, site.value.trim(), user.value.trim(), password.value, seed.value.trim() || null);
      msg.textContent = `Saved: ${b.name} can log in on ${saved.site} as ${saved.username}.`;
      msg.className = "ok";
      form.reset();
      await show();
    } catch (err) {
      fail(err);
    }
  });
  await show();
  modal(`Logins of ${b.name}`, el("div", {}, list, form));
}

/** The words of a command line: split at spaces, with '…' and "…" keeping spaces (and \ the next
 *  character); null when a quote is left open. */
export function commandWords(line: string): string[] | null {
  const words: string[] = [];
  let word: string | null = null;
  let quote: string | null = null;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (quote) {
      if (c === quote) quote = null;
      else if (c === "\\" && quote === '"' && i + 1 < line.length) word = (word ?? "") + line[++i];
      else word = (word ?? "") + c;
    } else if (c === "'" || c === '"') {
      quote = c;
      word ??= "";
    } else if (c === "\\" && i + 1 < line.length) {
      word = (word ?? "") + line[++i];
    } else if (/\s/.test(c)) {
      if (word !== null) words.push(word);
      word = null;
    } else {
      word = (word ?? "") + c;
    }
  }
  if (quote) return null;
  if (word !== null) words.push(word);
  return words;
}

/** A command as one would type it: a word with spaces or quotes in single quotes. */
function shownCommand(words: string[]): string {
  return words.map((w) => (w === "" || /[\s'"\\]/.test(w) ? `'${w.replace(/'/g, "'\\''")}'` : w)).join(" ");
}

/** A bot's MCP servers: each starts in the bot's computer, as the bot, for each of its runs, and
 *  its tools are offered to the model as SERVER__TOOL. Add one by command or by address; remove. */
export async function openMcpServers(b: BotRow) {
  const list = el("ul", { class: "mcp-servers", id: "mcp-servers" });
  const msg = el("p", { class: "muted", id: "mcp-message" }, "From the bot's next run on. Put no secret in a command: every process of the computer can read it.");
  const show = async () => {
    const servers = await api.botMcpServers(b.id).catch((e) => {
      msg.textContent = errorMessage(e);
      msg.className = "error";
      return [];
    });
    list.replaceChildren(
      ...(servers.length
        ? servers.map((s) =>
            el(
              "li",
              { "data-mcp-server": s.name },
              el("strong", {}, s.name),
              el("code", {}, s.url ?? shownCommand(s.command)),
              button("Remove", { class: "ghost small", title: `Remove ${s.name}` }, async () => {
                try {
                  await api.removeBotMcpServer(b.id, s.name);
                  await show();
                } catch (e) {
                  msg.textContent = errorMessage(e);
                  msg.className = "error";
                }
              }),
            ),
          )
        : [el("li", { class: "muted" }, "No MCP servers yet.")]),
    );
  };
  const name = el("input", { name: "name", id: "mcp-name", placeholder: "notes", required: "", title: "Letters, digits and -, at most 20" }) as HTMLInputElement;
  const how = el("input", { name: "how", id: "mcp-how", placeholder: "python3 notes_server.py   or   https://example.org/mcp", required: "" }) as HTMLInputElement;
  const form = el(
    "form",
    { class: "settings mcp-form" },
    el("label", { class: "field" }, el("span", {}, "Name"), name, el("small", {}, "Its tools are offered as NAME__TOOL.")),
    el("label", { class: "field" }, el("span", {}, "Command or address"), how, el("small", {}, "A command runs on stdio in the bot's folder; an http(s) address is called from inside the computer.")),
    el("button", { type: "submit", class: "primary" }, "Add server"),
    msg,
  ) as HTMLFormElement;
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const line = how.value.trim();
    const remote = /^https?:\/\//.test(line);
    const words = remote ? [] : commandWords(line);
    if (words === null) {
      msg.textContent = "A quote in the command is not closed.";
      msg.className = "error";
      return;
    }
    try {
      await api.addBotMcpServer(b.id, name.value.trim(), words, remote ? line : null);
      msg.textContent = `${b.name} uses ${name.value.trim()} from its next run on.`;
      msg.className = "ok";
      form.reset();
      await show();
    } catch (err) {
      msg.textContent = errorMessage(err);
      msg.className = "error";
    }
  });
  await show();
  modal(`MCP servers of ${b.name}`, list, form);
}

/** A model's context window, output per call and coordinate space, saved or back to its family's defaults. */
function limitsForm(m: ModelRow, now: Limits, done: () => Promise<void>): HTMLElement {
  const num = (name: "context_window" | "max_output", label: string, hint: string) =>
    el("label", { class: "price" }, el("span", {}, label), el("input", { type: "number", min: "1", step: "1", name, value: String(now[name]), required: "", title: hint }));
  // Claude's extended thinking: a budget per turn, or off; empty: the family's default.
  const thinking = el("input", {
    type: "number",
    min: "0",
    step: "1024",
    name: "thinking",
    value: now.thinking === null ? "" : String(now.thinking),
    placeholder: "default",
    title: "Claude's extended thinking per turn, in tokens (1024 or more; 0: off; empty: the family's default). Models with adaptive thinking decide for themselves.",
  }) as HTMLInputElement;
  const coords = el(
    "select",
    { name: "coordinates" },
    el("option", { value: "pixels", ...(m.coordinates === "pixels" ? { selected: "" } : {}) }, "pixels of the screenshot"),
    el("option", { value: "0-1000", ...(m.coordinates === "0-1000" ? { selected: "" } : {}) }, "0–1000 on each axis"),
    el("option", { value: "smart-resize", ...(m.coordinates === "smart-resize" ? { selected: "" } : {}) }, "pixels of its resized image (Qwen2.5-VL, UI-TARS-1.5)"),
  ) as HTMLSelectElement;
  const msg = el("p", { class: "muted" }, "Tokens. A local server may run a model with a smaller window than it could take: give the one it runs.");
  const form = el(
    "form",
    { class: "limits-form", "data-limits-for": m.id },
    num("context_window", "Context window", "Tokens the model takes in per call"),
    num("max_output", "Output per call", "Tokens the model may give out per call"),
    ...(m.kind === "anthropic" ? [el("label", { class: "price" }, el("span", {}, "Thinking"), thinking)] : []),
    el("label", { class: "price" }, el("span", {}, "Coordinates"), coords),
    el("button", { type: "submit", class: "primary" }, "Save"),
    button("Family defaults", { class: "ghost", type: "button" }, async () => {
      try {
        await api.setModelLimits(m.id, null);
        await api.setModelCoordinates(m.id, null);
        await done();
      } catch (e) {
        fail(e);
      }
    }),
    msg,
  ) as HTMLFormElement;
  const fail = (e: unknown) => {
    msg.textContent = errorMessage(e);
    msg.className = "error";
  };
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const v = (n: string) => Number((form.elements.namedItem(n) as HTMLInputElement).value);
    try {
      const budget = thinking.value.trim() === "" ? null : Number(thinking.value);
      await api.setModelLimits(m.id, { context_window: v("context_window"), max_output: v("max_output"), thinking: budget });
      await api.setModelCoordinates(m.id, coords.value as CoordSpace);
      await done();
    } catch (err) {
      fail(err);
    }
  });
  return form;
}

/** A model's four prices (dollars per million tokens), saved or cleared. */
function pricesForm(id: string, now: Prices | null, done: () => Promise<void>): HTMLElement {
  const input = (name: keyof Prices, label: string) =>
    el("label", { class: "price" }, el("span", {}, label), el("input", { type: "number", min: "0", step: "0.01", name, value: now ? String(now[name]) : "", required: "" }));
  const msg = el("p", { class: "muted" }, "Dollars per million tokens, from the provider's price list.");
  const form = el(
    "form",
    { class: "prices-form", "data-prices-for": id },
    input("input", "Input"),
    input("output", "Output"),
    input("cache_read", "Cache read"),
    input("cache_write", "Cache write"),
    el("button", { type: "submit", class: "primary" }, "Save prices"),
    button("No prices", { class: "ghost", type: "button" }, () => save(null)),
    msg,
  ) as HTMLFormElement;
  const save = async (p: Prices | null) => {
    try {
      await api.setModelPrices(id, p);
      await done();
    } catch (e) {
      msg.textContent = errorMessage(e);
      msg.className = "error";
    }
  };
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const v = (n: string) => Number((form.elements.namedItem(n) as HTMLInputElement).value);
    save({ input: v("input"), output: v("output"), cache_read: v("cache_read"), cache_write: v("cache_write") });
  });
  return form;
}

/** Model providers: the list, and a form whose key goes to the system keyring only. */
/** The models with Test, prices and limits, and the form to add one; `prefix` keeps its ids apart
 * from another copy on the page (the first page's). */
export async function modelsSection(prefix = ""): Promise<HTMLElement> {
  const box = el("section", { class: "models", id: `${prefix}models` });
  /** Reads the models with their prices and limits, then draws them. */
  const reload = async () => {
    const models = await api.listModels();
    // The new-bot form, open beside, follows.
    document.dispatchEvent(new CustomEvent("botdesk-models-changed"));
    const known = await Promise.all(models.map(async (m) => ({ m, prices: await api.modelPrices(m.id).catch(() => null), limits: await api.modelLimits(m.id).catch(() => null) })));
    drawModels(box, known, reload, prefix);
    // The first page's checklist reads the list as drawn.
    box.dispatchEvent(new CustomEvent("botdesk-models-changed"));
  };
  await reload();
  return box;
}

/** Each model's last Test as shown, kept while the list is drawn anew (until the app restarts). */
const checked = new Map<string, { cls: string; text: string }>();

function drawModels(box: HTMLElement, models: { m: ModelRow; prices: Prices | null; limits: Limits | null }[], reload: () => Promise<void>, prefix: string) {
  const list = el("ul", { class: "model-list" });
  const note = el("p", { class: "muted" }, "The key is kept in the system keyring (without one, in a file encrypted with your passphrase), never in the clear.");
  if (models.length === 0) list.append(el("li", { class: "muted" }, "No model yet. Bots need one to work on tasks."));
  for (const { m, prices, limits } of models) {
    const rm = button("Remove", { class: "ghost" }, async () => {
      try {
        await api.removeModel(m.id);
        checked.delete(m.id);
        await reload();
      } catch (e) {
        note.textContent = errorMessage(e);
        note.className = "error";
      }
    });
    const priced = prices ? `$${prices.input} in / $${prices.output} out per million tokens` : "no prices (runs show tokens only)";
    const edit = button("Prices", { class: "ghost", "data-edit-prices": m.id }, () => item.querySelector(".prices-form") || item.append(pricesForm(m.id, prices, reload)));
    const sized = limits ? `${limits.context_window.toLocaleString("en-US")}-token window, up to ${limits.max_output.toLocaleString("en-US")} out per call` : "";
    const editLimits = button("Limits", { class: "ghost", "data-edit-limits": m.id }, () => limits && (item.querySelector(".limits-form") || item.append(limitsForm(m, limits, reload))));
    const about = el(
      "div",
      { class: "model-about" },
      el("strong", {}, m.id),
      el("span", { class: "muted" }, ` ${m.kind} · ${m.model}${m.base_url ? " · " + m.base_url : ""} · ${m.has_key ? "key saved" : "no key"} · coordinates ${m.coordinates}`),
      el("div", { class: "muted model-prices" }, priced),
      el("div", { class: "muted model-limits" }, sized),
    );
    const said = el("div", { class: "muted model-check", "data-model-check": m.id });
    const show = (cls: string, text: string) => {
      said.className = `${cls} model-check`;
      said.textContent = text;
      checked.set(m.id, { cls, text });
    };
    const last = checked.get(m.id);
    if (last) show(last.cls, last.text);
    const test = button("Test", { class: "ghost", "data-test-model": m.id, title: "Send it one tiny request, as a run would" }, async () => {
      show("muted", "Asking…");
      try {
        const c = await api.testModel(m.id);
        show("ok", `Answered in ${(c.ms / 1000).toFixed(1)} s${c.usd === null ? "" : `, $${c.usd.toFixed(4)}`}: “${c.answer || "(no words)"}”`);
      } catch (e) {
        show("error", errorMessage(e));
      }
      box.dispatchEvent(new CustomEvent("botdesk-model-checked"));
    });
    about.append(said);
    const item = el("li", { "data-model": m.id }, about, test, edit, editLimits, rm);
    list.append(item);
  }
  const id = el("input", { placeholder: "id, e.g. claude", id: `${prefix}model-id`, "aria-label": "Model id" }) as HTMLInputElement;
  const kind = el("select", { id: `${prefix}model-kind`, "aria-label": "Provider" }, el("option", { value: "anthropic" }, "Anthropic"), el("option", { value: "openai" }, "OpenAI"), el("option", { value: "openai-compatible" }, "OpenAI-compatible (Ollama, vLLM, LM Studio, OpenRouter, xAI)")) as HTMLSelectElement;
  const model = el("input", { placeholder: "model, e.g. claude-sonnet-4-5", id: `${prefix}model-name`, "aria-label": "Model name" }) as HTMLInputElement;
  const url = el("input", { placeholder: "base URL (OpenAI-compatible only)", id: `${prefix}model-url`, "aria-label": "Base URL" }) as HTMLInputElement;
  const key = el("input", { type: "password", placeholder: "API key (empty for a local server)", id: `${prefix}model-key`, autocomplete: "off", "aria-label": "API key" }) as HTMLInputElement;
  const add = el("form", { class: "model-form" }, id, kind, model, url, key, el("button", { type: "submit", class: "primary" }, "Add model"), note);
  add.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      await api.addModel(id.value.trim(), kind.value as ModelKind, model.value.trim(), url.value.trim() || null, key.value || null);
      key.value = "";
      await reload();
    } catch (err) {
      note.textContent = errorMessage(err);
      note.className = "error";
    }
  });
  box.replaceChildren(list, add);
}
