//! The style and the lints, the generated TypeScript types, and the `.sqlx` query cache.

use super::*;

/// The style is enforced (rustfmt's layout, no clippy warning), and the committed `.sqlx/` query
/// cache must match the queries and the migrations. One compile does both: clippy checks every
/// query against a database made from the migrations and writes what it learned into
/// `target/sqlx-check/`, which must equal `.sqlx/` (what `cargo sqlx prepare --check` does, without
/// a second compile of the workspace).
pub(crate) fn lint() -> Result {
    say("checking the layout (cargo fmt --check), the lints (cargo clippy -D warnings) and the .sqlx query cache");
    status(cargo().args(["fmt", "--all", "--check"])).map_err(|e| format!("{e}: run `cargo fmt --all`"))?;
    let fresh = root().join("target/sqlx-check");
    let mut clippy = cargo();
    clippy.args(["clippy", "--workspace", "--all-targets", "--quiet", "--", "-D", "warnings"]);
    compile_queries(&mut clippy, &fresh)?;
    let differs = |what: &str| format!(".sqlx/ {what}: run `cargo xtask queries` and commit .sqlx/");
    let committed = query_files(&root().join(".sqlx"))?;
    let learned = query_files(&fresh)?;
    if let Some(name) = learned.keys().find(|n| !committed.contains_key(*n)) {
        return Err(differs(&format!("lacks {name} (a query was added or changed)")));
    }
    for (name, text) in &committed {
        match learned.get(name) {
            None => return Err(differs(&format!("holds {name}, which no query uses any more"))),
            Some(t) if t != text => return Err(differs(&format!("has an outdated {name} (not what its query gives against the migrations)"))),
            Some(_) => {}
        }
    }
    Ok(())
}

/// `cargo xtask types`: rewrites `ui/src/types.ts` from the engine's front-end types
/// (`crates/botdesk-engine/src/dto.rs`); a test of `cargo xtask test` fails while it is stale.
pub(crate) fn types() -> Result {
    let mut write = cargo();
    write.args(["test", "--quiet", "-p", "botdesk-engine", "--lib", "dto::tests::"]).env("BOTDESK_WRITE_TYPES", "1");
    status(&mut write)?;
    say("wrote ui/src/types.ts");
    Ok(())
}

/// `cargo xtask queries`: rewrites `.sqlx/` from the queries and the migrations (only once they
/// all compiled: a failed compile leaves `.sqlx/` as it was).
pub(crate) fn queries() -> Result {
    let (fresh, dir) = (root().join("target/sqlx-queries"), root().join(".sqlx"));
    let mut check = cargo();
    check.args(["check", "--workspace", "--all-targets", "--quiet"]);
    compile_queries(&mut check, &fresh)?;
    let learned = query_files(&fresh)?;
    for name in query_files(&dir)?.keys() {
        std::fs::remove_file(dir.join(name)).map_err(|e| io(name, e))?;
    }
    for (name, text) in &learned {
        std::fs::write(dir.join(name), text).map_err(|e| io(name, e))?;
    }
    say(&format!("wrote {} query files to .sqlx/", learned.len()));
    Ok(())
}

pub(crate) fn io(what: &str, e: std::io::Error) -> String {
    format!("{what}: {e}")
}

/// Runs `compile` (a check of the workspace) with the query macros online against a database
/// made from the migrations, saving each query's description into `out` (emptied first).
pub(crate) fn compile_queries(compile: &mut Command, out: &Path) -> Result {
    let target = root().join("target");
    for name in query_files(out)?.keys() {
        std::fs::remove_file(out.join(name)).map_err(|e| io(name, e))?;
    }
    std::fs::create_dir_all(out).map_err(|e| io("the query folder", e))?;
    let tmp = target.join("sqlx-tmp");
    std::fs::create_dir_all(&tmp).map_err(|e| io("target/sqlx-tmp", e))?;
    let db = target.join("sqlx-check.db");
    let _ = std::fs::remove_file(&db);
    // The schema is the migrations applied in order (their file names sort by version).
    let apply = "import sqlite3, sys, pathlib\n\
                 c = sqlite3.connect(sys.argv[1])\n\
                 for f in sorted(pathlib.Path(sys.argv[2]).glob('*.sql')):\n    c.executescript(f.read_text())\n\
                 c.commit()\n";
    status(Command::new("python3").args(["-c", apply]).arg(&db).arg(root().join("crates/botdesk-store/migrations")))?;
    // The macros run only when their crate compiles: touching its sources makes it compile. Every
    // query is in botdesk-store (a query elsewhere would be missed on a warm machine). Their times
    // are put back afterwards, so the test build does not compile the crates above it again.
    let src = root().join("crates/botdesk-store/src");
    let mut touched = vec![];
    for entry in std::fs::read_dir(&src).map_err(|e| io("crates/botdesk-store/src", e))? {
        let path = entry.map_err(|e| io("crates/botdesk-store/src", e))?.path();
        if path.extension().is_some_and(|e| e == "rs") {
            let f = std::fs::File::options().append(true).open(&path).map_err(|e| io(&path.display().to_string(), e))?;
            let was = f.metadata().and_then(|m| m.modified()).map_err(|e| io(&path.display().to_string(), e))?;
            f.set_modified(std::time::SystemTime::now()).map_err(|e| io(&path.display().to_string(), e))?;
            touched.push((f, was));
        }
    }
    let compiled = status(
        compile.env("SQLX_OFFLINE", "false").env("SQLX_OFFLINE_DIR", out).env("SQLX_TMP", &tmp).env("DATABASE_URL", format!("sqlite://{}", db.display())),
    );
    for (f, was) in touched {
        let _ = f.set_modified(was);
    }
    compiled
}

/// The query files (`query-<hash>.json`) in `dir` by name, with their text.
pub(crate) fn query_files(dir: &Path) -> Result<std::collections::BTreeMap<String, String>> {
    let mut files = std::collections::BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(files) };
    for entry in entries {
        let path = entry.map_err(|e| io(&dir.display().to_string(), e))?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.starts_with("query-") && name.ends_with(".json") {
            files.insert(name, std::fs::read_to_string(&path).map_err(|e| io(&path.display().to_string(), e))?);
        }
    }
    Ok(files)
}
