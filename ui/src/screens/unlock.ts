// The key vault's passphrase. Without a Secret Service the engine keeps keys in an encrypted file
// and refuses calls that need one (KEYS_LOCKED) until it has the passphrase: this dialog asks for
// it over whatever is open (a form being filled stays), once per app session, and the call that
// needed it goes on.
import { api, errorMessage, setKeysLockedHandler } from "../api";
import { button, el } from "../dom";

let asking: Promise<boolean> | null = null;

export function installUnlock() {
  setKeysLockedHandler(() => (asking ??= ask().finally(() => (asking = null))));
}

async function ask(): Promise<boolean> {
  const store = await api.keyStore();
  if (store.kind !== "vault" || !store.locked) return store.kind === "vault" || store.kind === "secret_service";
  const creating = !store.exists;
  const root = el("div", { class: "modal-backdrop unlock-backdrop", id: "unlock" });
  const pass = el("input", { type: "password", id: "unlock-passphrase", autocomplete: "new-password", "aria-label": "Passphrase" }) as HTMLInputElement;
  const again = el("input", { type: "password", id: "unlock-again", autocomplete: "new-password", "aria-label": "The same passphrase again" }) as HTMLInputElement;
  const error = el("p", { class: "error", id: "unlock-error", role: "alert" });
  const field = (label: string, input: HTMLElement) => el("label", { class: "field" }, el("span", {}, label), input);
  const title = creating ? "Choose a passphrase for your keys" : "Unlock your keys";
  const why = creating
    ? `No keyring (Secret Service) answers on this desktop, so Botdesk keeps model keys and logins in a file encrypted with a passphrase you choose now: ${store.path}. It is asked once each time the app starts; without it the keys cannot be read, by anyone.`
    : `No keyring (Secret Service) answers on this desktop: model keys and logins are in ${store.path}, encrypted with your passphrase. It is asked once each time the app starts.`;
  return new Promise<boolean>((resolve) => {
    const done = (ok: boolean) => {
      root.remove();
      resolve(ok);
    };
    const form = el(
      "form",
      {},
      el("p", { class: "muted" }, why),
      field("Passphrase", pass),
      ...(creating ? [field("Again", again)] : []),
      error,
      el("div", { class: "row" }, button("Cancel", { type: "button", id: "unlock-cancel" }, () => done(false)), el("button", { type: "submit", class: "primary", id: "unlock-submit" }, creating ? "Keep my keys" : "Unlock")),
    ) as HTMLFormElement;
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      if (!pass.value) return void (error.textContent = "Type a passphrase.");
      if (creating && pass.value !== again.value) return void (error.textContent = "The two passphrases differ.");
      try {
        await api.unlockKeys(pass.value);
        done(true);
      } catch (e) {
        error.textContent = errorMessage(e);
        pass.select();
      }
    });
    root.append(el("div", { class: "modal", role: "dialog", "aria-modal": "true", "aria-label": title }, el("header", {}, el("h2", {}, title)), form));
    document.body.append(root);
    pass.focus();
  });
}
