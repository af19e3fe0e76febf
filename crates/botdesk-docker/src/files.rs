//! Files through `botdesk-helper` inside the computer: every path is judged where the bot sees it,
//! and a symlink is never followed out of the workspace.

use bollard::container::LogOutput;
use botdesk_core::*;
use bytes::Bytes;
use futures::StreamExt;
use serde::Deserialize;
use std::io::Read;
use tokio::io::AsyncWriteExt;
use tokio_util::io::{StreamReader, SyncIoBridge};

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

/// Streams the helper's tar export, parsed on a blocking thread into entries.
pub async fn export(p: &DockerProvider, c: &ComputerRef) -> Result<EntryStream> {
    let container = p.running_container(c).await?;
    let argv = vec!["botdesk-helper".to_string(), "export".to_string()];
    let (exec_id, output, _stdin) = p.start_exec(InComputer::Bot(BotUser::PRIVATE), &container, argv, vec![], HOME, false, false).await?;
    let stderr = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let err_sink = stderr.clone();
    let stdout = output.filter_map(move |item| {
        let r = match item {
            Ok(LogOutput::StdOut { message }) => Some(Ok(message)),
            Ok(LogOutput::StdErr { message }) => {
                err_sink.lock().unwrap().extend_from_slice(&message);
                None
            }
            Ok(_) => None,
            Err(e) => Some(Err(std::io::Error::other(e))),
        };
        futures::future::ready(r)
    });
    let reader = SyncIoBridge::new(StreamReader::new(stdout));
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<ExportEntry>>(16);
    let parse_tx = tx.clone();
    let parse = tokio::task::spawn_blocking(move || parse_tar(reader, &parse_tx));
    let client = p.client().await?.clone();
    tokio::spawn(async move {
        let parsed = parse.await.unwrap_or_else(|e| Err(ComputerError::Provider(format!("export parser crashed: {e}"))));
        let code = match crate::provider::wait_exit_code(&client, &exec_id).await {
            Ok(code) => code,
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return;
            }
        };
        if let Err(e) = parsed {
            let _ = tx.send(Err(e)).await;
        } else if code != 0 {
            let err = stderr.lock().unwrap().clone();
            let _ = tx.send(Err(helper_error(&WorkspacePath::root(), 0, code, &err))).await;
        }
    });
    Ok(tokio_stream_from(rx))
}

fn tokio_stream_from(mut rx: tokio::sync::mpsc::Receiver<Result<ExportEntry>>) -> EntryStream {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed()
}

fn parse_tar(reader: impl Read, tx: &tokio::sync::mpsc::Sender<Result<ExportEntry>>) -> Result<()> {
    let bad = |e: std::io::Error| ComputerError::Provider(format!("bad export stream from the computer: {e}"));
    let mut archive = tar::Archive::new(reader);
    let entries = archive.entries().map_err(bad)?;
    for entry in entries {
        let mut entry = entry.map_err(bad)?;
        let raw_path = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let path = WorkspacePath::parse(&raw_path)?;
        let header = entry.header();
        let body = match header.entry_type() {
            tar::EntryType::Directory => EntryBody::Dir,
            tar::EntryType::Symlink => {
                let target = entry.link_name_bytes().map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
                EntryBody::Symlink { target }
            }
            tar::EntryType::Regular => {
                let executable = header.mode().map_err(bad)? & 0o100 != 0;
                let mut bytes = Vec::with_capacity(header.size().map_err(bad)? as usize);
                entry.read_to_end(&mut bytes).map_err(bad)?;
                EntryBody::File { bytes: Bytes::from(bytes), executable }
            }
            _ => continue,
        };
        if tx.blocking_send(Ok(ExportEntry { path, body })).is_err() {
            return Ok(()); // the reader went away
        }
    }
    // Read the tar's trailing padding too: closing early would break the helper's pipe.
    std::io::copy(&mut archive.into_inner(), &mut std::io::sink()).map_err(bad)?;
    Ok(())
}

/// Last member of every import stream (see `botdesk-helper import`).
const COMPLETE_MARKER: &str = ".botdesk-import-complete";

/// Writes the entries as a tar stream into the helper's stdin. An entry that escapes the workspace
/// aborts the stream before the helper moves anything into place.
pub async fn import(p: &DockerProvider, c: &ComputerRef, mut entries: EntryStream) -> Result<ImportSummary> {
    let container = p.running_container(c).await?;
    let argv = vec!["botdesk-helper".to_string(), "import".to_string()];
    let (exec_id, mut output, mut input) = p.start_exec(InComputer::Bot(BotUser::PRIVATE), &container, argv, vec![], HOME, true, false).await?;
    let io = |e: std::io::Error| ComputerError::Provider(format!("writing the import stream: {e}"));
    let writer = async move {
        let written = write_tar(&mut entries, &mut input).await;
        // Always close stdin: on error the helper then sees a truncated tar, fails, and removes
        // its staging area, so nothing changed.
        let closed = input.shutdown().await.map_err(io);
        written.and(closed)
    };
    // On failure the writer's error is the one worth reporting.
    let (w, r) = tokio::join!(writer, crate::provider::collect_output(&mut output, crate::provider::QUIET_MAX));
    w?;
    let (out, err) = r?;
    let code = p.exec_exit_code(&exec_id).await?;
    if code != 0 {
        return Err(helper_error(&WorkspacePath::root(), 0, code, &err));
    }
    #[derive(Deserialize)]
    struct Summary {
        files: u64,
        dirs: u64,
        symlinks: u64,
        bytes: u64,
    }
    let s: Summary = serde_json::from_slice(&out).map_err(|e| ComputerError::Provider(format!("bad import summary: {e}")))?;
    Ok(ImportSummary { files: s.files, dirs: s.dirs, symlinks: s.symlinks, bytes: s.bytes })
}

async fn write_tar(entries: &mut EntryStream, input: &mut (impl tokio::io::AsyncWrite + Unpin)) -> Result<()> {
    let io = |e: std::io::Error| ComputerError::Provider(format!("writing the import stream: {e}"));
    let mut builder = tar::Builder::new(Vec::new());
    while let Some(entry) = entries.next().await {
        let entry = entry?;
        let mut h = tar::Header::new_gnu();
        match &entry.body {
            EntryBody::Dir => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(0o755);
                h.set_size(0);
                builder.append_data(&mut h, entry.path.as_str(), std::io::empty()).map_err(io)?;
            }
            EntryBody::Symlink { target } => {
                if entry.path.symlink_destination(target).is_none() {
                    return Err(PathError::Escapes(format!("{} -> {target}", entry.path)).into());
                }
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                builder.append_link(&mut h, entry.path.as_str(), target).map_err(io)?;
            }
            EntryBody::File { bytes, executable } => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(if *executable { 0o755 } else { 0o644 });
                h.set_size(bytes.len() as u64);
                builder.append_data(&mut h, entry.path.as_str(), &bytes[..]).map_err(io)?;
            }
        }
        let chunk = std::mem::take(builder.get_mut());
        input.write_all(&chunk).await.map_err(io)?;
    }
    // The helper applies nothing unless the stream ends with this marker, so an import cut short
    // (by an error here or a dropped connection) changes nothing.
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_mode(0o644);
    h.set_size(0);
    builder.append_data(&mut h, COMPLETE_MARKER, std::io::empty()).map_err(io)?;
    let rest = builder.into_inner().map_err(io)?;
    input.write_all(&rest).await.map_err(io)?;
    Ok(())
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
