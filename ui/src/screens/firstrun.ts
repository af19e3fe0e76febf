// The set-up steps: Docker, the computer image (built here with its progress), a model.
import { api, errorMessage } from "../api";
import { button, el } from "../dom";
import { changed, state } from "../store";
import type { BuildProgress, DoctorReport } from "../types";
import { modal, openSettings } from "./settings";

export function firstRun(report: DoctorReport) {
  const docker = report.checks.find((c) => c.name === "docker");
  const image = report.checks.find((c) => c.name === "image");
  const age = report.checks.find((c) => c.name === "image_age");
  const step = (n: number, title: string, ok: boolean | null, ...body: Node[]) =>
    el("section", { class: "step " + (ok === null ? "" : ok ? "done" : "todo") }, el("h3", {}, `${n}. ${title}`), ...body);
  const bar = el("div", { class: "progress", hidden: "" }, el("div", { class: "progress-fill" }));
  const stage = el("p", { class: "muted", id: "build-stage" });
  const stale = image?.ok && age?.warn;
  const build = button(stale ? "Rebuild with current packages" : "Build the computer image", { class: "primary", id: "build-image" }, async () => {
    build.disabled = true;
    bar.hidden = false;
    const fill = bar.firstElementChild as HTMLElement;
    const show = (p: BuildProgress) => {
      if (p.stage === "step") fill.style.width = `${Math.round((100 * p.step) / p.total)}%`;
      stage.textContent = p.stage === "done" ? `Built ${p.image}.` : p.stage === "send" ? `Sending to ${p.host}…` : p.message;
    };
    try {
      await api.buildImage(show, !!stale);
      fill.style.width = "100%";
      state.health = await api.doctor();
      changed("health");
    } catch (e) {
      stage.textContent = errorMessage(e);
      stage.className = "error";
      build.disabled = false;
    }
  });
  if (!docker?.ok) build.disabled = true;
  modal(
    "Set up Botdesk",
    step(1, "Docker", docker?.ok ?? false, el("p", {}, docker?.detail ?? ""), ...(docker?.ok ? [] : [el("p", { class: "muted" }, `Fix: ${docker?.fix ?? ""}`)])),
    step(
      2,
      "The computer image",
      (image?.ok ?? false) && !stale,
      el("p", {}, image?.detail ?? ""),
      ...(stale ? [el("p", { class: "warning" }, age?.detail ?? ""), el("p", { class: "muted" }, `Fix: ${age?.fix ?? ""}`)] : []),
      ...(image?.ok && !stale ? [] : [build, bar, stage]),
    ),
    step(3, "A model", null, el("p", { class: "muted" }, "Add the model your bots will use (you can also do it later in Settings)."), button("Add a model…", { id: "first-run-model" }, () => openSettings())),
    el(
      "div",
      { class: "row" },
      button("Check again", {}, async () => {
        state.health = await api.doctor();
        changed("health");
        firstRun(state.health);
      }),
    ),
  );
}

