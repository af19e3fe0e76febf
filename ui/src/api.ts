// The only place the UI talks to the Tauri shell. Every type here is generated from the engine's
// (`types.ts`, `cargo xtask types`).
import { Channel, invoke as tauriInvoke, InvokeArgs } from "@tauri-apps/api/core";
import { listen, UnlistenFn } from "@tauri-apps/api/event";
import type { ActivityRow, Approvals, BotList, BotLogin, BotMcpServer, ModelCheck, BotSpend, BotView, BrowserGo, BrowserView, Budget, BuildProgress, ChatItem, ComputerScope, ControlLease, CoordSpace, DoctorReport, EngineError, ErrorCode, History, KeyStore, LeftRunning, HostView, Limits, Listing, ModelKind, ModelRow, NetPolicy, Preview, Prices, Question, ReplayView, RestoreReport, RunEvent, RunSummary, Settings, SettingsView, SwitchReport, Verdict } from "./types";

export function errorMessage(e: unknown): string {
  if (e && typeof e === "object" && "message" in e) return String((e as EngineError).message);
  return String(e);
}

export function errorCode(e: unknown): ErrorCode | null {
  if (e && typeof e === "object" && "code" in e) return (e as EngineError).code;
  return null;
}

/** Asks the person for the key vault's passphrase; true once it is unlocked. */
let onKeysLocked: ((message: string) => Promise<boolean>) | null = null;
export function setKeysLockedHandler(f: (message: string) => Promise<boolean>) {
  onKeysLocked = f;
}

/** A command; one that needs the locked key vault waits for its passphrase and is tried again. */
async function invoke<T>(cmd: string, args?: InvokeArgs): Promise<T> {
  try {
    return await tauriInvoke<T>(cmd, args);
  } catch (e) {
    if (errorCode(e) !== "KEYS_LOCKED" || cmd === "unlock_keys" || !onKeysLocked || !(await onKeysLocked(errorMessage(e)))) throw e;
    return tauriInvoke<T>(cmd, args);
  }
}

export const api = {
  /** Where keys are kept: the Secret Service, or the encrypted vault (locked or not). */
  keyStore: () => invoke<KeyStore>("key_store"),
  unlockKeys: (passphrase: string) => invoke<void>("unlock_keys", { passphrase }),
  listBots: () => invoke<BotList>("list_bots"),
  createBot: (name: string, scope: ComputerScope, model: string | null, host: string) => invoke<BotView>("create_bot", { name, scope, model, host }),
  chat: (bot: string) => invoke<ChatItem[]>("chat", { bot }),
  botSpend: (bot: string) => invoke<BotSpend>("bot_spend", { bot }),
  sendTask: (bot: string, task: string) => invoke<string>("send_task", { bot, task }),
  shot: (path: string) => invoke<string>("shot", { path }),
  /** The bot's latest runs, newest first. */
  runs: (bot: string) => invoke<RunSummary[]>("runs", { bot }),
  /** One run's steps and recording, for the replay view. */
  replay: (bot: string, run: string) => invoke<ReplayView>("replay", { bot, run }),
  /** `count` frames of the run's recording from `fromMs` after its first, as JPEG data URLs. */
  replayFrames: (run: string, fromMs: number, count: number) => invoke<string[]>("replay_frames", { run, fromMs, count }),
  activity: (bot: string) => invoke<ActivityRow[]>("activity", { bot }),
  /** `version`: in that kept version of the folder (null: as it is now). */
  listFiles: (bot: string, path: string, version: number | null = null) => invoke<Listing>("list_files", { bot, path, version }),
  preview: (bot: string, path: string, version: number | null = null) => invoke<Preview>("preview_file", { bot, path, version }),
  download: (bot: string, path: string, version: number | null = null) => invoke<string>("download_file", { bot, path, version }),
  /** The versions of the bot's folder, newest first. */
  history: (bot: string) => invoke<History>("history", { bot }),
  /** The bot's folder (`path` null) or one path back as it was in `version`; the present is saved first. */
  restore: (bot: string, version: number, path: string | null) => invoke<RestoreReport>("restore_version", { bot, version, path }),
  /** "Undo this run's file changes": the bot's folder back to the version the run started from. */
  undoRun: (run: string) => invoke<RestoreReport>("undo_run", { run }),
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
  /** The question the bot's run waits on (a safety check), if any. */
  openQuestion: (bot: string) => invoke<Question | null>("open_question", { bot }),
  answerQuestion: (bot: string, verdict: Verdict, note: string | null) => invoke<Question>("answer_question", { bot, verdict, note }),
  doctor: () => invoke<DoctorReport>("doctor"),
  getSettings: () => invoke<SettingsView>("get_settings"),
  saveSettings: (settings: Settings) => invoke<Settings>("save_settings", { settings }),
  /** `refresh` rebuilds every layer with current packages (a newer Chromium). */
  buildImage: (onProgress: (p: BuildProgress) => void, refresh = false) => {
    const progress = new Channel<BuildProgress>();
    progress.onmessage = onProgress;
    return invoke<string>("build_image", { refresh, progress });
  },
  /** The Docker hosts: `local` first. */
  listHosts: () => invoke<HostView[]>("list_hosts"),
  listModels: () => invoke<ModelRow[]>("list_models"),
  testModel: (id: string) => invoke<ModelCheck>("test_model", { id }),
  modelPrices: (id: string) => invoke<Prices | null>("model_prices", { id }),
  setModelPrices: (id: string, prices: Prices | null) => invoke<void>("set_model_prices", { id, prices }),
  modelLimits: (id: string) => invoke<Limits>("model_limits", { id }),
  /** null: back to the family's defaults. */
  setModelLimits: (id: string, limits: Limits | null) => invoke<Limits>("set_model_limits", { id, limits }),
  /** null: back to what the model's family was trained on. */
  setModelCoordinates: (id: string, coordinates: CoordSpace | null) => invoke<ModelRow>("set_model_coordinates", { id, coordinates }),
  /** tokens null: the default; usd null: no dollar limit. */
  setBotBudget: (bot: string, tokens: number | null, usd: number | null) => invoke<Budget>("set_bot_budget", { bot, tokens, usd }),
  botNetwork: (bot: string) => invoke<NetPolicy>("bot_network", { bot }),
  /** allow: the domains and addresses of mode "allow". */
  setBotNetwork: (bot: string, mode: NetPolicy["mode"], allow: string[]) => invoke<NetPolicy>("set_bot_network", { bot, mode, allow }),
  setBot: (bot: string, name: string | null, model: string | null) => invoke<BotView>("set_bot", { bot, name, model }),
  botApprovals: (bot: string) => invoke<Approvals>("bot_approvals", { bot }),
  setBotApprovals: (bot: string, approvals: Approvals) => invoke<Approvals>("set_bot_approvals", { bot, approvals }),
  botLogins: (bot: string) => invoke<BotLogin[]>("bot_logins", { bot }),
  addBotLogin: (bot: string, site: string, user: string, password: string, codeSeed: string | null) => invoke<BotLogin>("add_bot_login", { bot, site, user, password, codeSeed }),
  removeBotLogin: (bot: string, site: string) => invoke<void>("remove_bot_login", { bot, site }),
  botMcpServers: (bot: string) => invoke<BotMcpServer[]>("bot_mcp_servers", { bot }),
  addBotMcpServer: (bot: string, name: string, command: string[], url: string | null) => invoke<BotMcpServer>("add_bot_mcp_server", { bot, name, command, url }),
  removeBotMcpServer: (bot: string, name: string) => invoke<void>("remove_bot_mcp_server", { bot, name }),
  addModel: (id: string, kind: ModelKind, model: string, baseUrl: string | null, key: string | null) =>
    invoke<ModelRow>("add_model", { id, kind, model, baseUrl, key }),
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
  copyBotClipboard: (bot: string) => invoke<string>("copy_bot_clipboard", { bot }),
  /** Opens the bot's screen in a window of its own (or brings that window forward). */
  openScreenWindow: (bot: string) => invoke<void>("open_screen_window", { bot }),
  /** With `pause`, the bot's run pauses at its next step boundary first (this waits for it). */
  takeControl: (bot: string, pause = false) => invoke<ControlLease>("take_control", { bot, pause }),
  releaseControl: (bot: string, skipped = false, note: string | null = null) => invoke<void>("release_control", { bot, skipped, note }),
  stopBot: (bot: string) => invoke<string[]>("stop_bot", { bot }),
  switchBot: (bot: string, scope: ComputerScope) => invoke<SwitchReport>("switch_bot", { bot, scope }),
  uiReady: (bots: number) => invoke<void>("ui_ready", { bots }),
  /** Every bot with its state, whenever any of them changed (also by another process). */
  onBotsChanged: (f: (bots: BotList) => void): Promise<UnlistenFn> => listen<BotList>("bots-changed", (e) => f(e.payload)),
  /** A click on one of the app's desktop notifications: the bot it is about. */
  /** The window's close button was pressed (the app waits for the person's choice). */
  onQuitRequested: (f: () => void): Promise<UnlistenFn> => listen("quit-requested", () => f()),
  /** What keeps running once the app quits. */
  leftRunning: () => invoke<LeftRunning>("left_running"),
  /** Quits; `suspend`: running computers nobody works on are saved and suspended first. */
  quit: (suspend: boolean) => invoke<void>("quit_app", { suspend }),
  onOpenBot: (f: (bot: string) => void): Promise<UnlistenFn> => listen<string>("open-bot", (e) => f(e.payload)),
};
