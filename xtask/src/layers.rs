//! The crates' layers, checked: each crate depends (for building, not for its tests) only on
//! crates of a lower layer, so the workspace forms no circle and nothing points up. Read from the
//! manifests themselves (no cargo, no registry), by this module's test in `cargo xtask test`.

use std::path::Path;

/// Each crate's layer: the domain, then what stores, thinks or runs computers, then the engine
/// (and the provider conformance suite), then the front ends and the bench.
const LAYERS: &[(&str, u8)] = &[
    ("botdesk-core", 0),
    ("botdesk-store", 1),
    ("botdesk-agent", 1),
    ("botdesk-docker", 1),
    ("botdesk-fake", 1),
    ("botdesk-rfb", 1),
    ("botdesk-conformance", 2),
    ("botdesk-engine", 2),
    ("botdesk-cli", 3),
    ("botdesk-app", 3),
    ("botdesk-bench", 3),
];

/// The workspace's crates a manifest depends on to build (its `[dependencies]`, also per target).
fn build_deps(manifest: &str) -> Vec<String> {
    let mut deps = vec![];
    let mut building = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            building = line == "[dependencies]" || (line.starts_with("[target.") && line.ends_with(".dependencies]"));
            continue;
        }
        if let Some((name, _)) = line.split_once(['=', '.']) {
            let name = name.trim();
            if building && LAYERS.iter().any(|(c, _)| *c == name) {
                deps.push(name.to_string());
            }
        }
    }
    deps
}

fn package_name(manifest: &str) -> Option<String> {
    let package = manifest.split("[package]").nth(1)?;
    let line = package.lines().find(|l| l.trim_start().starts_with("name"))?;
    Some(line.split('"').nth(1)?.to_string())
}

/// The edges that point sideways or up, as "from → to" lines; and any crate missing a layer.
pub fn violations(root: &Path) -> Vec<String> {
    let layer = |name: &str| LAYERS.iter().find(|(c, _)| *c == name).map(|(_, l)| *l);
    let mut manifests: Vec<_> = std::fs::read_dir(root.join("crates")).unwrap().filter_map(|e| e.ok()).map(|e| e.path().join("Cargo.toml")).collect();
    manifests.push(root.join("src-tauri/Cargo.toml"));
    let mut bad = vec![];
    for m in manifests.iter().filter(|m| m.exists()) {
        let text = std::fs::read_to_string(m).unwrap();
        let Some(name) = package_name(&text) else { continue };
        let Some(from) = layer(&name) else {
            bad.push(format!("{name} has no layer in xtask/src/layers.rs"));
            continue;
        };
        for dep in build_deps(&text) {
            if layer(&dep).is_some_and(|to| to >= from) {
                bad.push(format!("{name} → {dep}"));
            }
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn the_crates_form_layers_and_nothing_points_sideways_or_up() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        assert_eq!(super::violations(&root), Vec::<String>::new());
        // The check sees an edge that points up.
        let up = "[package]\nname = \"botdesk-core\"\n[dependencies]\nbotdesk-engine.workspace = true\n";
        assert_eq!(super::build_deps(up), ["botdesk-engine"]);
        assert_eq!(super::package_name(up).as_deref(), Some("botdesk-core"));
    }
}
