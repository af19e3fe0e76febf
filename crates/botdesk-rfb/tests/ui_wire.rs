//! The viewer's side of the wire format (ui/src/wire.ts) replays the golden fixtures in
//! `wire.json`, as the frame server's unit test does (`replays_the_golden_wire_fixtures`): the
//! TypeScript test is bundled with the UI's own esbuild and run with `node --test`.

use std::{path::Path, process::Command};

#[test]
fn the_viewer_replays_the_golden_wire_fixtures() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ui = crate_dir.join("../../ui");
    let out = tempfile::tempdir().unwrap();
    let bundle = out.path().join("wire.test.mjs");
    let built = Command::new(ui.join("node_modules/.bin/esbuild"))
        .arg(ui.join("tests/wire.test.ts"))
        .args(["--bundle", "--platform=node", "--format=esm", "--log-level=warning"])
        .arg(format!("--outfile={}", bundle.display()))
        .output()
        .expect("esbuild from the UI's npm packages (cargo xtask prepare installs them)");
    assert!(built.status.success(), "bundling the test: {}", String::from_utf8_lossy(&built.stderr));
    let run = Command::new("node").arg("--test").arg(&bundle).env("WIRE_FIXTURE", crate_dir.join("wire.json")).output().expect("node");
    let said = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "the viewer's replay failed:\n{said}{}", String::from_utf8_lossy(&run.stderr));
    assert!(said.contains("# pass 4") && said.contains("# fail 0"), "every case ran:\n{said}");
}
