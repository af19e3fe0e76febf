//! Files through `botdesk-helper` inside the computer: every path is judged where the bot sees it,
//! and a symlink is never followed out of the workspace.

use botdesk_core::*;
use bytes::Bytes;
use serde::Deserialize;

use crate::{spec::InComputer, DockerProvider};

#[derive(Deserialize)]
struct HelperError {
    code: String,
    message: String,
    #[serde(default)]
    size: Option<u64>,
}

/// Maps the helper's exit-3 JSON error (or any other failure) to the provider's error.
pub(crate) fn helper_error(path: &WorkspacePath, max: u64, code: i32, stderr: &[u8]) -> ComputerError {
    let text = String::from_utf8_lossy(stderr);
    match serde_json::from_str::<HelperError>(text.lines().last().unwrap_or("")) {
        Ok(e) if code == 3 => match e.code.as_str() {
            "PATH_ESCAPES" => PathError::Escapes(path.to_string()).into(),
            "TOO_LARGE" => ComputerError::TooLarge { path: path.to_string(), size: e.size.unwrap_or(0), max },
            "NOT_FOUND" => ComputerError::NotFound(path.to_string()),
            _ => ComputerError::Invalid(e.message),
        },
        _ => ComputerError::Provider(format!("workspace helper failed with exit {code}: {}", text.trim())),
    }
}

/// Most a listing may hold (about half a million entries).
const MAX_LISTING: u64 = 64 << 20;
/// How long one helper call may take (a read of the largest file included).
const HELPER_BOUND: std::time::Duration = std::time::Duration::from_secs(300);

/// The workspace helper's program in the computer.
const HELPER: &str = "botdesk-helper";
/// The helper's file reader, in Perl: it starts in about 2 ms where Python takes 10 to 14, and every
/// file a person opens in the Files pane (and `botdesk files cat`) waits for that start.
const READER: &str = "botdesk-read";

/// Runs `argv` ([`HELPER`] or [`READER`] and its arguments); its answer may be `max` bytes long at
/// most.
/// It runs as `user`, the bot the call is for: a Team bot reaches only what its uid may.
async fn helper(p: &DockerProvider, c: &ComputerRef, user: BotUser, path: &WorkspacePath, argv: &[&str], stdin: Option<Bytes>, max: u64) -> Result<Vec<u8>> {
    let container = p.running_container(c).await?;
    let max_out = max.max(crate::provider::QUIET_MAX);
    let (code, out, err) =
        tokio::time::timeout(HELPER_BOUND, p.run_quiet_max(InComputer::Bot(user), &container, argv, stdin, max_out)).await.map_err(|_| {
            ComputerError::TimedOut(format!(
                "the computer's workspace helper did not finish `{}` within {} s",
                argv[..2.min(argv.len())].join(" "),
                HELPER_BOUND.as_secs()
            ))
        })??;
    if code != 0 {
        return Err(helper_error(path, max, code, &err));
    }
    Ok(out)
}

#[derive(Deserialize)]
struct Row {
    name: String,
    kind: String,
    size: u64,
    executable: bool,
}

pub async fn list(p: &DockerProvider, c: &ComputerRef, user: BotUser, dir: &WorkspacePath) -> Result<Vec<FileEntry>> {
    let out = helper(p, c, user, dir, &[HELPER, "list", dir.as_str()], None, MAX_LISTING).await?;
    parse_listing(dir, &out)
}

/// The helper's listing of `dir`: a name that is not a plain relative path is an error.
fn parse_listing(dir: &WorkspacePath, out: &[u8]) -> Result<Vec<FileEntry>> {
    let rows: Vec<Row> = serde_json::from_slice(out).map_err(|e| ComputerError::Provider(format!("bad listing from the computer: {e}")))?;
    let mut entries = vec![];
    for r in rows {
        let kind = match r.kind.as_str() {
            "dir" => FileKind::Dir,
            "symlink" => FileKind::Symlink,
            _ => FileKind::File,
        };
        // One level: each name is one entry of the folder, never a path.
        if r.name.is_empty() || r.name == "." || r.name == ".." || r.name.contains('/') || r.name.contains('\0') {
            return Err(ComputerError::Provider(format!("bad listing from the computer: {:?} is not a name in {dir}", r.name)));
        }
        // A real name no workspace path can address (a backslash, `~` at the root) is left out.
        match dir.child(&r.name) {
            Ok(path) => entries.push(FileEntry { path, kind, size: r.size, executable: r.executable }),
            Err(e) => tracing::warn!("leaving {:?} out of the listing of {dir}: {e}", r.name),
        }
    }
    Ok(entries)
}

pub async fn create_dir(p: &DockerProvider, c: &ComputerRef, user: BotUser, dir: &WorkspacePath) -> Result<()> {
    helper(p, c, user, dir, &[HELPER, "mkdir", dir.as_str()], None, 0).await.map(drop)
}

pub async fn read(p: &DockerProvider, c: &ComputerRef, user: BotUser, path: &WorkspacePath, max: u64) -> Result<Bytes> {
    helper(p, c, user, path, &[READER, path.as_str(), &max.to_string()], None, max).await.map(Bytes::from)
}

pub async fn write(p: &DockerProvider, c: &ComputerRef, user: BotUser, path: &WorkspacePath, data: Bytes, executable: bool) -> Result<()> {
    if path.is_root() {
        return Err(ComputerError::Invalid("cannot write to the workspace root".into()));
    }
    helper(p, c, user, path, &[HELPER, "write", path.as_str(), if executable { "1" } else { "0" }], Some(data), 0).await.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

        /// Whatever a computer answers to a listing: entries inside the folder listed, or one
        /// error; never a panic.
        #[test]
        fn any_listing_gives_entries_inside_the_folder_or_an_error(
            names in proptest::collection::vec(prop_oneof!["[a-z./]{0,12}", "\\PC{0,12}", Just("../../etc".to_string()), Just("/etc".to_string()), Just("~".to_string())], 0..6),
            raw in proptest::collection::vec(any::<u8>(), 0..80),
            kind in prop_oneof![Just("dir"), Just("file"), Just("symlink"), Just("fifo")],
        ) {
            let dir = WorkspacePath::parse("shared/x").unwrap();
            let rows: Vec<_> = names.iter().map(|n| serde_json::json!({"name": n, "kind": kind, "size": 1, "executable": false})).collect();
            for answer in [serde_json::to_vec(&rows).unwrap(), raw] {
                if let Ok(entries) = parse_listing(&dir, &answer) {
                    for e in entries {
                        prop_assert!(e.path.as_str().starts_with("shared/x/"), "{}", e.path);
                    }
                }
            }
        }
    }
}
