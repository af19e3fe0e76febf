// Keyboard events → X keysyms (what RFB key events carry). Any Unicode character maps: Latin-1 to
// itself, everything else to 0x01000000 + code point.

const SPECIAL: Record<string, number> = {
  Backspace: 0xff08, Tab: 0xff09, Enter: 0xff0d, Escape: 0xff1b, Delete: 0xffff,
  Home: 0xff50, ArrowLeft: 0xff51, ArrowUp: 0xff52, ArrowRight: 0xff53, ArrowDown: 0xff54,
  PageUp: 0xff55, PageDown: 0xff56, End: 0xff57, Insert: 0xff63, ContextMenu: 0xff67,
  NumLock: 0xff7f, CapsLock: 0xffe5, ScrollLock: 0xff14, Pause: 0xff13, PrintScreen: 0xff61,
  Shift: 0xffe1, Control: 0xffe3, Alt: 0xffe9, AltGraph: 0xfe03, Meta: 0xffeb, OS: 0xffeb,
};
const RIGHT: Record<string, number> = { ShiftRight: 0xffe2, ControlRight: 0xffe4, AltRight: 0xffea, MetaRight: 0xffec };

export function keysymForChar(ch: string): number {
  const cp = ch.codePointAt(0)!;
  if ((cp >= 0x20 && cp <= 0x7e) || (cp >= 0xa0 && cp <= 0xff)) return cp;
  return 0x01000000 + cp;
}

/** The keysym of a key event, or null when it carries no key (IME composition, dead keys). */
export function keysymOf(e: KeyboardEvent): number | null {
  if (e.code in RIGHT) return RIGHT[e.code]!;
  if (e.key in SPECIAL) return SPECIAL[e.key]!;
  const f = /^F([1-9]|1[0-2])$/.exec(e.key);
  if (f) return 0xffbe + Number(f[1]) - 1;
  if ([...e.key].length === 1) return keysymForChar(e.key);
  return null;
}
