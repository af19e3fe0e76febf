// Replays the viewer's golden fixtures (crates/botdesk-rfb/wire.json) through ui/src/wire.ts, as
// the Rust frame server's test does through ws.rs. Run by crates/botdesk-rfb/tests/ui_wire.rs
// (bundled with esbuild, run with `node --test`); the fixture's path comes in WIRE_FIXTURE.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { decodeFrame, decodeNotice, key, pointer, refresh, viewport } from "../src/wire";

const fx = JSON.parse(readFileSync(process.env.WIRE_FIXTURE!, "utf8"));
const bytes = (hex: string) => new Uint8Array(hex.match(/../g)!.map((b) => parseInt(b, 16))).buffer;
const hexOf = (buf: ArrayBuffer, at: number, len: number) =>
  Array.from(new Uint8Array(buf, at, len), (b) => b.toString(16).padStart(2, "0")).join("");

test("binary messages decode to the sizes and pixels the fixture names", () => {
  for (const c of fx.to_viewer) {
    c.messages.forEach((hex: string, i: number) => {
      const buf = bytes(hex);
      const f = decodeFrame(buf);
      assert.ok(f, `${c.what}: message ${i} decodes`);
      const got =
        f.kind === "size" ? f : { kind: "rects", rects: f.rects.map(({ x, y, w, h, offset, len }) => ({ x, y, w, h, rgba: hexOf(buf, offset, len) })) };
      assert.deepEqual(got, c.decoded[i], c.what);
    });
  }
});

test("a cut or unknown binary message is refused, not read past its end", () => {
  const whole = fx.to_viewer[0].messages[1] as string;
  assert.equal(decodeFrame(bytes(whole.slice(0, whole.length - 2))), null);
  assert.equal(decodeFrame(bytes("0201")), null);
  assert.equal(decodeFrame(bytes("07")), null);
  assert.equal(decodeFrame(new ArrayBuffer(0)), null);
});

test("text messages decode to the states the fixture names", () => {
  for (const c of fx.to_viewer_text) assert.deepEqual(decodeNotice(c.text), c.decoded, c.text);
  assert.equal(decodeNotice("not json"), null);
  assert.equal(decodeNotice('{"type":"other"}'), null);
});

test("the viewer's input is sent exactly as the fixture writes it", () => {
  for (const c of fx.from_viewer) {
    const i = c.input;
    const sent =
      i === "refresh"
        ? refresh()
        : i.pointer
          ? pointer(i.pointer.x, i.pointer.y, i.pointer.buttons)
          : i.key
            ? key(i.key.keysym, i.key.down)
            : viewport(i.viewport.w, i.viewport.h);
    assert.equal(sent, c.text);
  }
});
