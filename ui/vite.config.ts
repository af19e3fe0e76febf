import { defineConfig } from "vite";

// Tauri serves ui/dist from inside the binary; no dev server is needed for builds or tests.
export default defineConfig({
  clearScreen: false,
  build: { target: "safari15", outDir: "dist", emptyOutDir: true },
});
