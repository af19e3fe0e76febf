// The only place the UI talks to the Tauri shell.
import { Channel, invoke } from "@tauri-apps/api/core";
import { listen, UnlistenFn } from "@tauri-apps/api/event";

/** What moving a bot between the Team computer and its Private one did. */
export interface SwitchReport {
  bot: string;
  scope: Scope;
  from: string;
  to: string;
  copied: number;
  kept_newer: string[];
  profile: boolean;
}

export type Scope = "team" | "private";
export type BotStatus = "idle" | "running" | "pausing" | "waiting_for_you" | "you_have_control" | "error";

export interface BotView {
  id: string;
  name: string;
  computer: { id: string; name: string; scope: Scope };
  model: string | null;
  instructions: string;
  folder: string;
  status: BotStatus;
  /** Whether its run waits for the person, and why (Release resumes it). */
  run: RunHold;
}

export type RunHold = "none" | "working" | "asked_for_you" | "paused_for_you";

/** The page as the bot's `browser_snapshot` sees it. */
export interface PageSnapshot {
  url: string;
  title: string;
  text: string;
  elements: { ref: string; role: string; name: string; value: string | null }[];
}

export interface BrowserView {
  closed: boolean;
  page: PageSnapshot | null;
  tabs: { title: string; url: string; current: boolean }[];
}

export type BrowserGo = { go: "navigate"; url: string } | { go: "back" } | { go: "forward" } | { go: "reload" };

export interface Check {
  name: string;
  ok: boolean;
  detail: string;
  fix?: string;
  /** Works, but should be seen to (an image whose packages are old). */
  warn?: boolean;
}

export interface DoctorReport {
  ok: boolean;
  checks: Check[];
}

export interface Settings {
  memory_mib: number;
  cpus: number;
  screen_limit: number | null;
}

export interface SettingsView {
  settings: Settings;
  data_dir: string;
  image: string;
}

export interface ModelView {
  id: string;
  kind: "anthropic" | "openai" | "openai-compatible";
  model: string;
  base_url: string | null;
  has_key: boolean;
  /** How the model gives screen coordinates. */
  coordinates: "pixels" | "0-1000";
}

/** Dollars per million tokens. */
export interface Prices {
  input: number;
  output: number;
  cache_read: number;
  cache_write: number;
}

/** A model's context window and output tokens per call. */
export interface Limits {
  context_window: number;
  max_output: number;
}

/** What each of a bot's runs may spend: tokens, and dollars when set. */
export interface Budget {
  tokens: number;
  usd: number | null;
}

export interface ControlLease {
  lease_id: string;
  bot_id: string;
  expires_at: number;
}

export interface ChatCall {
  id: string;
  name: string;
  /** The tool works on the bot's screen or browser. */
  graphical: boolean;
  arguments: string;
  status: "running" | "done" | "error";
  text: string | null;
  image: string | null;
  attachment: string | null;
}

export interface ChatItem {
  id: number;
  run_id: string;
  role: "user" | "assistant" | "system";
  text: string;
  calls: ChatCall[];
  created_at: number;
  /** On the last message of a run: what its model calls cost so far (dollars when its model's prices are known). */
  usage?: Usage;
  cost_usd?: number;
  /** On the last message of a failed run: what it failed of. */
  failure?: RunFailure;
}

/** Why a run failed (the run's message says it in a sentence). */
export type RunFailure =
  | "MODEL_BAD_KEY"
  | "MODEL_UNKNOWN"
  | "MODEL_NO_IMAGES"
  | "MODEL_UNAVAILABLE"
  | "MODEL_ERROR"
  | "CONTEXT_TOO_SMALL"
  | "OVER_BUDGET"
  | "STEP_LIMIT"
  | "COMPUTER_STOPPED"
  | "INTERRUPTED"
  | "NOT_STARTED";

/** Tokens as the model provider counted them; `input` excludes what the prompt cache served or stored. */
export interface Usage {
  input: number;
  output: number;
  cache_read: number;
  cache_write: number;
}

/** What a bot's runs have cost so far (dollars only over calls of models with prices), and what each may spend. */
export interface BotSpend {
  tokens: Usage;
  usd: number;
  unpriced_calls: number;
  budget: Budget;
}

/** "12,345 in (10,000 from cache), 321 out tokens, $0.0123" (as the CLI says it). */
export function usageText(u: Usage, usd?: number | null): string {
  const n = (v: number) => v.toLocaleString("en-US");
  const cache = [u.cache_read ? `${n(u.cache_read)} from cache` : "", u.cache_write ? `${n(u.cache_write)} to cache` : ""].filter(Boolean).join(", ");
  const cost = usd == null ? "" : `, $${usd.toFixed(4)}`;
  return `${n(u.input + u.cache_read + u.cache_write)} in${cache ? ` (${cache})` : ""}, ${n(u.output)} out tokens${cost}`;
}

export type RunEvent =
  | { type: "delta"; bot: string; run_id: string; text: string }
  | { type: "message"; bot: string; item: ChatItem }
  | { type: "tool"; bot: string; run_id: string; call: ChatCall }
  | { type: "activity"; bot: string; entry: ActivityRow }
  | { type: "status"; bot: string; run_id: string; status: string; error: string | null; failure: RunFailure | null }
  | { type: "usage"; bot: string; run_id: string; call: Usage; run: Usage; run_usd: number | null }
  | { type: "restart"; bot: string; run_id: string; why: string };

export interface ActivityRow {
  id: number;
  bot_id: string;
  run_id: string | null;
  kind: string;
  target: string;
  status: "running" | "done" | "failed" | "error";
  exit_code: number | null;
  output_tail: string;
  created_at: number;
  updated_at: number;
}

export interface FileEntry {
  path: string;
  kind: "file" | "dir" | "symlink";
  size: number;
  executable: boolean;
}

export type Preview =
  | { kind: "text"; text: string; size: number }
  | { kind: "image"; url: string; size: number }
  | { kind: "binary"; size: number }
  | { kind: "too_large"; size: number }
  | { kind: "dir"; size: number };

export type BuildProgress =
  | { stage: "fetch_uv"; message: string }
  | { stage: "base"; message: string }
  | { stage: "step"; step: number; total: number; message: string }
  | { stage: "done"; image: string };

/** Errors from the engine: a code the UI may branch on and a sentence for the person. */
export interface EngineError {
  code: string;
  message: string;
}

export function errorMessage(e: unknown): string {
  if (e && typeof e === "object" && "message" in e) return String((e as EngineError).message);
  return String(e);
}

export function errorCode(e: unknown): string | null {
  if (e && typeof e === "object" && "code" in e) return String((e as EngineError).code);
  return null;
}

export const api = {
  listBots: () => invoke<BotView[]>("list_bots"),
  createBot: (name: string, scope: Scope, model: string | null) => invoke<BotView>("create_bot", { name, scope, model }),
  chat: (bot: string) => invoke<ChatItem[]>("chat", { bot }),
  botSpend: (bot: string) => invoke<BotSpend>("bot_spend", { bot }),
  sendTask: (bot: string, task: string) => invoke<string>("send_task", { bot, task }),
  shot: (path: string) => invoke<string>("shot", { path }),
  activity: (bot: string) => invoke<ActivityRow[]>("activity", { bot }),
  listFiles: (bot: string, path: string) => invoke<{ path: string; entries: FileEntry[] }>("list_files", { bot, path }),
  preview: (bot: string, path: string) => invoke<Preview>("preview_file", { bot, path }),
  download: (bot: string, path: string) => invoke<string>("download_file", { bot, path }),
  upload: (bot: string, path: string, data: string) => invoke<string>("upload_file", { bot, path, data }),
  terminalOpen: (bot: string, cols: number, rows: number, onOutput: (bytes: Uint8Array | null) => void) => {
    const output = new Channel<number[]>();
    output.onmessage = (b) => onOutput(b.length ? new Uint8Array(b) : null);
    return invoke<string>("terminal_open", { bot, cols, rows, output });
  },
  terminalInput: (id: string, data: string) => invoke<void>("terminal_input", { id, data }),
  terminalResize: (id: string, cols: number, rows: number) => invoke<void>("terminal_resize", { id, cols, rows }),
  terminalClose: (id: string) => invoke<void>("terminal_close", { id }),
  watchFiles: (bot: string | null) => invoke<void>("watch_files", { bot }),
  onFilesChanged: (f: (bot: string) => void): Promise<UnlistenFn> => listen<string>("files-changed", (e) => f(e.payload)),
  onRunEvent: (f: (e: RunEvent) => void): Promise<UnlistenFn> => listen<RunEvent>("run-event", (e) => f(e.payload)),
  doctor: () => invoke<DoctorReport>("doctor"),
  getSettings: () => invoke<SettingsView>("get_settings"),
  saveSettings: (settings: Settings) => invoke<Settings>("save_settings", { settings }),
  /** `refresh` rebuilds every layer with current packages (a newer Chromium). */
  buildImage: (onProgress: (p: BuildProgress) => void, refresh = false) => {
    const progress = new Channel<BuildProgress>();
    progress.onmessage = onProgress;
    return invoke<string>("build_image", { refresh, progress });
  },
  listModels: () => invoke<ModelView[]>("list_models"),
  modelPrices: (id: string) => invoke<Prices | null>("model_prices", { id }),
  setModelPrices: (id: string, prices: Prices | null) => invoke<void>("set_model_prices", { id, prices }),
  modelLimits: (id: string) => invoke<Limits>("model_limits", { id }),
  /** null: back to the family's defaults. */
  setModelLimits: (id: string, limits: Limits | null) => invoke<Limits>("set_model_limits", { id, limits }),
  /** null: back to what the model's family was trained on. */
  setModelCoordinates: (id: string, coordinates: ModelView["coordinates"] | null) => invoke<ModelView>("set_model_coordinates", { id, coordinates }),
  /** tokens null: the default; usd null: no dollar limit. */
  setBotBudget: (bot: string, tokens: number | null, usd: number | null) => invoke<Budget>("set_bot_budget", { bot, tokens, usd }),
  addModel: (id: string, kind: string, model: string, baseUrl: string | null, key: string | null) =>
    invoke<ModelView>("add_model", { id, kind, model, baseUrl, key }),
  removeModel: (id: string) => invoke<void>("remove_model", { id }),
  openScreen: (bot: string) => invoke<string>("open_screen", { bot }),
  closeScreen: (bot: string) => invoke<void>("close_screen", { bot }),
  /** The Browser pane: the bot's page and tabs (starts nothing). */
  browserView: (bot: string) => invoke<BrowserView>("browser_view", { bot }),
  /** Drives the bot's browser (while the person controls its screen). */
  browserGo: (bot: string, go: BrowserGo) => invoke<unknown>("browser_go", { bot, go }),
  /** The person's clipboard text to the bot's (while they control its screen). */
  setClipboard: (bot: string, text: string) => invoke<void>("set_clipboard", { bot, text }),
  /** The bot's clipboard text. */
  botClipboard: (bot: string) => invoke<string>("bot_clipboard", { bot }),
  /** Opens the bot's screen in a window of its own (or brings that window forward). */
  openScreenWindow: (bot: string) => invoke<void>("open_screen_window", { bot }),
  /** With `pause`, the bot's run pauses at its next step boundary first (this waits for it). */
  takeControl: (bot: string, pause = false) => invoke<ControlLease>("take_control", { bot, pause }),
  releaseControl: (bot: string, skipped = false, note: string | null = null) => invoke<void>("release_control", { bot, skipped, note }),
  stopBot: (bot: string) => invoke<string[]>("stop_bot", { bot }),
  switchBot: (bot: string, scope: Scope) => invoke<SwitchReport>("switch_bot", { bot, scope }),
  uiReady: (bots: number) => invoke<void>("ui_ready", { bots }),
  onBotsChanged: (f: () => void): Promise<UnlistenFn> => listen("bots-changed", f),
};
