// Small DOM helpers shared by the views.

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

export function humanSize(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}
