// Small DOM helpers shared by the screens.

export function el(tag: string, attrs: Record<string, string> = {}, ...children: (Node | string)[]): HTMLElement {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  for (const c of children) e.append(c);
  return e;
}

export function button(label: string, attrs: Record<string, string>, onClick: () => void): HTMLButtonElement {
  const b = el("button", attrs, label) as HTMLButtonElement;
  b.addEventListener("click", onClick);
  return b;
}

export const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
