// How numbers, names and states read for a person (the CLI says them the same way).
import type { BotRow, BotStatus, Usage } from "./types";

export function initials(name: string): string {
  return name
    .split(/[\s._-]+/)
    .filter(Boolean)
    .slice(0, 2)
    .map((w) => w[0]!.toUpperCase())
    .join("");
}

export const STATUS: Record<BotStatus, string> = {
  idle: "Idle",
  running: "Running",
  pausing: "Pausing…",
  waiting_for_you: "Waiting for you",
  you_have_control: "You have control",
  error: "Error",
};

/** A bot's status as the sidebar and its header say it: who drives it when a client outside
 *  the app does ("Driven by MCP: claude-code"). */
export function statusText(b: BotRow): string {
  return b.driver && b.status === "running" ? `Driven by ${b.driver}` : STATUS[b.status];
}

/** 950, 11.6k, 2.31M */
export function shortTokens(n: number): string {
  return n < 1000 ? String(n) : n < 1e6 ? `${(n / 1000).toFixed(1)}k` : `${(n / 1e6).toFixed(2)}M`;
}

/** "12,345 in (10,000 from cache), 321 out tokens, $0.0123" (as the CLI says it). */
export function usageText(u: Usage, usd?: number | null): string {
  const n = (v: number) => v.toLocaleString("en-US");
  const cache = [u.cache_read ? `${n(u.cache_read)} from cache` : "", u.cache_write ? `${n(u.cache_write)} to cache` : ""].filter(Boolean).join(", ");
  const cost = usd == null ? "" : `, $${usd.toFixed(4)}`;
  return `${n(u.input + u.cache_read + u.cache_write)} in${cache ? ` (${cache})` : ""}, ${n(u.output)} out tokens${cost}`;
}

export function humanSize(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

/** The last part of a workspace path. */
export function baseName(path: string): string {
  return path.split("/").pop() || path;
}
