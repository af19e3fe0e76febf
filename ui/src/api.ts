// The only place the UI talks to the Tauri shell.
import { invoke } from "@tauri-apps/api/core";

export type Scope = "team" | "private";

export interface BotView {
  id: string;
  name: string;
  computer: { id: string; name: string; scope: Scope };
  model: string | null;
  instructions: string;
  folder: string;
}

export interface Check {
  name: string;
  ok: boolean;
  detail: string;
  fix?: string;
}

export interface DoctorReport {
  ok: boolean;
  checks: Check[];
}

/** Errors from the engine: a code the UI may branch on and a sentence for the person. */
export interface EngineError {
  code: string;
  message: string;
}

export function errorMessage(e: unknown): string {
  if (e && typeof e === "object" && "message" in e) return String((e as EngineError).message);
  return String(e);
}

export const api = {
  listBots: () => invoke<BotView[]>("list_bots"),
  createBot: (name: string, scope: Scope) => invoke<BotView>("create_bot", { name, scope }),
  doctor: () => invoke<DoctorReport>("doctor"),
  uiReady: (bots: number) => invoke<void>("ui_ready", { bots }),
};
