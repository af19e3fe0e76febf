//! The crates' layers, checked: each crate depends (for building, not for its tests) only on
//! crates of a lower layer, so the workspace forms no circle and nothing points up. And the
//! provider boundary: nothing above the provider crates depends on Docker's types (the engine
//! does not build against `botdesk-docker` nor `bollard`; the CLI and the app name only
//! `botdesk_docker::machine`, which gives a `dyn Machine`). Read from the manifests and sources
//! themselves (no cargo, no registry), by this module's tests in `cargo xtask test`.

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
    all_build_deps(manifest).into_iter().filter(|d| LAYERS.iter().any(|(c, _)| c == d)).collect()
}

/// Every crate a manifest depends on to build.
fn all_build_deps(manifest: &str) -> Vec<String> {
    let mut deps = vec![];
    let mut building = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            building = line == "[dependencies]" || (line.starts_with("[target.") && line.ends_with(".dependencies]"));
            continue;
        }
        if let Some((name, _)) = line.split_once(['=', '.']) {
            let name = name.trim();
            if building && !name.is_empty() {
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

/// Every crate's manifest: those under `crates/`, and the app's.
fn manifests(root: &Path) -> Vec<std::path::PathBuf> {
    let mut all: Vec<_> = std::fs::read_dir(root.join("crates")).unwrap().filter_map(|e| e.ok()).map(|e| e.path().join("Cargo.toml")).collect();
    all.push(root.join("src-tauri/Cargo.toml"));
    all.retain(|m| m.exists());
    all
}

/// The edges that point sideways or up, as "from → to" lines; and any crate missing a layer.
pub fn violations(root: &Path) -> Vec<String> {
    let layer = |name: &str| LAYERS.iter().find(|(c, _)| *c == name).map(|(_, l)| *l);
    let manifests = manifests(root);
    let mut bad = vec![];
    for m in &manifests {
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

/// Crates that build with no Docker at all: they know providers only as `ComputerProvider` and
/// `Machine` (the bench, which measures the Docker provider itself beside `docker run`, and the
/// front ends, which choose it, are not among them).
const NO_DOCKER: &[&str] = &["botdesk-core", "botdesk-store", "botdesk-agent", "botdesk-fake", "botdesk-rfb", "botdesk-conformance", "botdesk-engine"];

/// The front ends: they may choose the Docker provider, by `botdesk_docker::machine` only.
const CHOOSERS: &[(&str, &str)] = &[("botdesk-cli", "crates/botdesk-cli/src"), ("botdesk-app", "src-tauri/src")];

/// Where Docker's types reach above the providers, as lines.
pub fn docker_leaks(root: &Path) -> Vec<String> {
    let mut bad = vec![];
    let manifests = manifests(root);
    for m in &manifests {
        let text = std::fs::read_to_string(m).unwrap();
        let Some(name) = package_name(&text) else { continue };
        for dep in all_build_deps(&text) {
            let docker = dep == "bollard" && name != "botdesk-docker" || dep == "botdesk-docker" && NO_DOCKER.contains(&name.as_str());
            if docker {
                bad.push(format!("{name} builds against {dep}"));
            }
        }
    }
    for (name, dir) in CHOOSERS {
        for file in rust_files(&root.join(dir)) {
            let text = std::fs::read_to_string(&file).unwrap();
            for (i, _) in text.match_indices("botdesk_docker::") {
                let rest = &text[i + "botdesk_docker::".len()..];
                let item: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if item != "machine" || rest[item.len()..].starts_with("::") {
                    bad.push(format!("{name} uses botdesk_docker::{item} in {}", file.display()));
                }
            }
        }
    }
    bad
}

fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).into_iter().flatten().filter_map(|e| e.ok()) {
        let p = e.path();
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    #[test]
    fn the_crates_form_layers_and_nothing_points_sideways_or_up() {
        assert_eq!(super::violations(&root()), Vec::<String>::new());
        // The check sees an edge that points up.
        let up = "[package]\nname = \"botdesk-core\"\n[dependencies]\nbotdesk-engine.workspace = true\n";
        assert_eq!(super::build_deps(up), ["botdesk-engine"]);
        assert_eq!(super::package_name(up).as_deref(), Some("botdesk-core"));
    }

    #[test]
    fn nothing_above_the_provider_crates_depends_on_docker_types() {
        assert_eq!(super::docker_leaks(&root()), Vec::<String>::new());
        // The check sees a Docker dependency and a Docker type named by a front end.
        let leaky = "[package]\nname = \"botdesk-engine\"\n[dependencies]\nbollard.workspace = true\n";
        assert_eq!(super::all_build_deps(leaky), ["bollard"]);
        let dir = std::env::temp_dir().join(format!("botdesk-layers-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("crates/botdesk-cli/src")).unwrap();
        std::fs::create_dir_all(dir.join("src-tauri/src")).unwrap();
        std::fs::write(dir.join("crates/botdesk-cli/Cargo.toml"), leaky.replace("botdesk-engine", "botdesk-cli")).unwrap();
        std::fs::write(dir.join("crates/botdesk-cli/src/main.rs"), "let p = botdesk_docker::machine(l);\nlet d = botdesk_docker::DockerProvider::new(c);")
            .unwrap();
        std::fs::write(dir.join("src-tauri/src/main.rs"), "use botdesk_docker::machine::Machine;").unwrap();
        let leaks = super::docker_leaks(dir.as_path());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(leaks.len(), 3, "{leaks:?}");
        assert!(
            leaks[0] == "botdesk-cli builds against bollard"
                && leaks[1].contains("botdesk_docker::DockerProvider")
                && leaks[2].contains("botdesk_docker::machine")
        );
    }
}
