//! The home store on this machine, `DATA_DIR/homes/<home-key>/`: immutable checkpoint versions
//! `v<N>` and a `current` symlink, written only by this app as the person (the computer never
//! mounts it). This module is the host side of the home stream (`botdesk_core::home_stream`),
//! all blocking file work:
//!
//! - [`receive`] writes a stream coming out of a computer into a new version. The stream is
//!   hostile: every path is checked, a record's folder must be one this stream made (so nothing
//!   is ever written through a symlink, and no path is resolved inside a tree a bot can write),
//!   `same` is honoured only for files of the manifest we sent, sizes are only stream lengths.
//! - [`send_tree`] streams a version (or part of it) back into a computer; it never follows a
//!   symlink either.
//! - [`prepare`] starts a new version as hard links to the previous one (from the previous
//!   version's index, `v<N>.index`, so nothing is walked); [`receive`] then changes only what the
//!   stream says changed, and removes what it no longer names.
//! - [`commit`] makes a finished version `current` with one rename and moves the versions the
//!   retention no longer keeps to `trash/`, which [`sweep`] empties after the checkpoint returned; [`tidy`] removes what an
//!   interrupted checkpoint left, so a crash at any point leaves the previous version whole and
//!   the next checkpoint working.

use std::collections::HashMap;
use std::fs;
use std::io::{self, BufRead, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use botdesk_core::home_stream::{file_records, read_header, FileData, ManifestEntry, Record, SaveOptions};
use serde::Serialize;

use crate::versions::{self, Changed, Meta, Retention};
use crate::{EngineError, ErrorCode, Result};

/// Names not saved inside `.browser-profiles/`: caches, and lock files that would break the next
/// start of the browser.
pub(crate) const BROWSER_JUNK: &[&str] = &[
    "Cache",
    "Code Cache",
    "GPUCache",
    "GrShaderCache",
    "ShaderCache",
    "DawnCache",
    "DawnGraphiteCache",
    "DawnWebGPUCache",
    "component_crx_cache",
    "extensions_crx_cache",
    "SingletonLock",
    "SingletonSocket",
    "SingletonCookie",
    "LOCK",
    "lockfile",
];
pub(crate) const PROFILES: &str = ".browser-profiles";

/// A file error while saving or restoring a workspace, with a full disk said plainly.
pub(crate) fn err(doing: &str, path: &Path, e: io::Error) -> EngineError {
    let why = if e.raw_os_error() == Some(28) { "the disk holding the data directory is full".to_string() } else { e.to_string() };
    EngineError::new(ErrorCode::Internal, format!("{doing} {}: {why}", path.display()))
}

/// A thing the computer did not hand over (a FIFO, socket or device; an unreadable file).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Skipped {
    pub path: String,
    pub why: String,
}

/// The version `current` points at, if any.
pub(crate) fn current_version(store: &Path) -> Option<(u64, PathBuf)> {
    let target = fs::read_link(store.join("current")).ok()?;
    let name = target.file_name()?.to_str()?.to_string();
    let n = name.strip_prefix('v')?.parse().ok()?;
    Some((n, store.join(name)))
}

/// Takes the lock file of a home store for the life of the returned file.
pub(crate) fn lock_store(store: &Path) -> Result<fs::File> {
    fs::create_dir_all(store).map_err(|e| err("creating", store, e))?;
    let path = store.join(".lock");
    let f = fs::File::options().create(true).truncate(false).write(true).mode(0o600).open(&path).map_err(|e| err("opening", &path, e))?;
    f.lock().map_err(|e| err("locking", &path, e))?;
    Ok(f)
}

/// Removes what an interrupted checkpoint left (under the store's lock): partial versions,
/// versions newer than `current` (renamed but never made current), indexes of versions other than
/// `current`, a half-made `current.new`. (Replaced versions wait in `trash/` for [`sweep`].)
pub(crate) fn tidy(store: &Path) -> Result<()> {
    let current = current_version(store).map(|(n, _)| n);
    let _ = fs::remove_file(store.join("current.new"));
    for e in fs::read_dir(store).map_err(|e| err("reading", store, e))?.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(rest) = name.strip_prefix('v') else { continue };
        let stale = if rest.ends_with(".partial") {
            true
        } else if let Some(n) = rest.strip_suffix(".index") {
            n.parse::<u64>().ok() != current
        } else if let Some(n) = rest.strip_suffix(".meta") {
            // A version's meta stays with its version.
            !store.join(format!("v{n}")).is_dir() || n.parse::<u64>().is_ok_and(|n| Some(n) > current)
        } else {
            rest.parse::<u64>().is_ok_and(|n| Some(n) > current || current.is_none())
        };
        if stale {
            remove_tree(&e.path())?;
        }
    }
    Ok(())
}

/// Empties the store's `trash/` (versions a checkpoint replaced). Runs after the checkpoint
/// returned, without the store's lock: nothing else ever uses what is in `trash/`, and two
/// sweeps at once (the app and the CLI) only remove the same things.
pub(crate) fn sweep(store: &Path) -> Result<()> {
    let trash = store.join(TRASH);
    let entries = match fs::read_dir(&trash) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(err("reading", &trash, e)),
    };
    for e in entries.flatten() {
        remove_tree(&e.path())?;
    }
    Ok(())
}

const TRASH: &str = "trash";

/// Removes a tree of ours, also its read-only folders; never follows a link. What another
/// remover took first is fine.
pub(crate) fn remove_tree(p: &Path) -> Result<()> {
    let gone = |r: io::Result<()>, at: &Path| match r {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(err("removing", at, e)),
        _ => Ok(()),
    };
    let m = match fs::symlink_metadata(p) {
        Ok(m) => m,
        Err(e) => return gone(Err(e), p),
    };
    if !m.is_dir() {
        return gone(fs::remove_file(p), p);
    }
    if m.mode() & 0o700 != 0o700 {
        gone(fs::set_permissions(p, fs::Permissions::from_mode((m.mode() & 0o7777) | 0o700)), p)?;
    }
    // Read whole before going down, so a deep tree does not hold a descriptor per level.
    let entries: Vec<(PathBuf, bool)> = match fs::read_dir(p) {
        Ok(it) => it.flatten().map(|e| (e.path(), e.file_type().is_ok_and(|t| t.is_dir()))).collect(),
        Err(e) => return gone(Err(e), p),
    };
    for (path, dir) in entries {
        if dir {
            remove_tree(&path)?;
        } else {
            gone(fs::remove_file(&path), &path)?;
        }
    }
    gone(fs::remove_dir(p), p)
}

pub(crate) fn mtime_ns(m: &fs::Metadata) -> i64 {
    m.mtime().saturating_mul(1_000_000_000).saturating_add(m.mtime_nsec())
}

pub(crate) fn time_of(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

/// Sets a symlink's own modification time (std has no way that does not follow it).
pub(crate) fn link_mtime(p: &Path, ns: i64) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other)?;
    let t = libc::timespec { tv_sec: ns.div_euclid(1_000_000_000), tv_nsec: ns.rem_euclid(1_000_000_000) };
    let times = [t, t];
    // SAFETY: a valid C string and two timespecs; AT_SYMLINK_NOFOLLOW keeps it on the link.
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The index of a version, `v<N>.index` beside it (written by [`receive`] or
/// [`write_walk_index`], made the version's by [`commit`]): its folders and regular files, one a
/// line, in walk order (see [`walk_cmp`]), so the next checkpoint reads it as it goes instead of
/// walking the version or holding it. The lines are also the manifest the computer reads
/// (`botdesk_core::home_stream`):
///
/// ```text
/// botdesk-index 2
/// d "PATH"
/// f SIZE MTIME_NS MODE "PATH"
/// ```
///
/// Versions never change, so neither does their index.
pub(crate) const INDEX_HEAD: &str = "botdesk-index 2";

/// One line of an index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IndexEntry {
    Dir(String),
    /// Path, size, mtime (ns), mode.
    File(ManifestEntry),
}

impl IndexEntry {
    pub fn path(&self) -> &str {
        match self {
            IndexEntry::Dir(p) | IndexEntry::File((p, ..)) => p,
        }
    }

    fn parse(line: &str) -> Option<IndexEntry> {
        let line = line.strip_suffix('\n')?;
        if let Some(p) = line.strip_prefix("d ") {
            return serde_json::from_str(p).ok().map(IndexEntry::Dir);
        }
        let mut f = line.strip_prefix("f ")?.splitn(4, ' ');
        let (size, mtime, mode) = (f.next()?.parse().ok()?, f.next()?.parse().ok()?, f.next()?.parse().ok()?);
        Some(IndexEntry::File((serde_json::from_str(f.next()?).ok()?, size, mtime, mode)))
    }
}

/// Writes an index file, a line per entry (see [`INDEX_HEAD`]).
pub(crate) struct IndexWriter {
    w: io::BufWriter<fs::File>,
    path: PathBuf,
}

impl IndexWriter {
    pub fn create(path: &Path) -> Result<IndexWriter> {
        let f = fs::File::options().write(true).create(true).truncate(true).mode(0o600).open(path).map_err(|e| err("writing", path, e))?;
        let mut w = IndexWriter { w: io::BufWriter::with_capacity(256 * 1024, f), path: path.to_path_buf() };
        writeln!(w.w, "{INDEX_HEAD}").map_err(|e| err("writing", path, e))?;
        Ok(w)
    }

    pub fn push(&mut self, e: &IndexEntry) -> Result<()> {
        let json = |p: &str| serde_json::to_string(p).expect("a string serialises");
        match e {
            IndexEntry::Dir(p) => writeln!(self.w, "d {}", json(p)),
            IndexEntry::File((p, size, mtime, mode)) => writeln!(self.w, "f {size} {mtime} {mode} {}", json(p)),
        }
        .map_err(|e| err("writing", &self.path, e))
    }

    pub fn finish(mut self) -> Result<()> {
        self.w.flush().map_err(|e| err("writing", &self.path, e))
    }
}

/// Reads an index file a line at a time.
pub(crate) struct IndexReader {
    r: io::BufReader<fs::File>,
    line: String,
    path: PathBuf,
}

impl IndexReader {
    /// Opens an index of this format (else an error: one from before it, or not an index).
    pub fn open(path: &Path) -> Result<IndexReader> {
        let f = fs::File::open(path).map_err(|e| err("reading", path, e))?;
        let mut r = IndexReader { r: io::BufReader::with_capacity(256 * 1024, f), line: String::new(), path: path.to_path_buf() };
        r.r.read_line(&mut r.line).map_err(|e| err("reading", path, e))?;
        if r.line.trim_end() != INDEX_HEAD {
            return Err(err("reading", path, io::Error::other("not an index of this Botdesk")));
        }
        Ok(r)
    }
}

impl Iterator for IndexReader {
    type Item = Result<IndexEntry>;

    fn next(&mut self) -> Option<Result<IndexEntry>> {
        self.line.clear();
        match self.r.read_line(&mut self.line) {
            Ok(0) => None,
            Ok(_) => Some(
                IndexEntry::parse(&self.line).ok_or_else(|| err("reading", &self.path, io::Error::other(format!("a damaged line: {}", self.line.trim_end())))),
            ),
            Err(e) => Some(Err(err("reading", &self.path, e))),
        }
    }
}

fn index_path(store: &Path, version: u64) -> PathBuf {
    store.join(format!("v{version}.index"))
}

/// Where a checkpoint writes the index of version `version` until [`commit`] (what [`tidy`]
/// removes if it never got there).
pub(crate) fn partial_index_path(store: &Path, version: u64) -> PathBuf {
    store.join(format!("v{version}.index.partial"))
}

/// The index file of version `version` (at `root`). One that is missing, damaged or from before
/// this format is made anew by a walk of the version (never following a symlink).
pub(crate) fn index_file(store: &Path, version: u64, root: &Path) -> Result<PathBuf> {
    let path = index_path(store, version);
    if IndexReader::open(&path).is_ok() {
        return Ok(path);
    }
    let partial = partial_index_path(store, version);
    write_walk_index(root, &partial)?;
    fs::rename(&partial, &path).map_err(|e| err("writing", &path, e))?;
    Ok(path)
}

/// Writes the index of the tree at `root` to `to`, by a walk. Returns its files and their bytes.
pub(crate) fn write_walk_index(root: &Path, to: &Path) -> Result<(u64, u64)> {
    let mut w = IndexWriter::create(to)?;
    let (mut files, mut bytes) = (0, 0);
    walk(root, "", &mut |rel, meta| {
        if meta.is_dir() {
            w.push(&IndexEntry::Dir(rel.to_string()))
        } else if meta.is_file() {
            files += 1;
            bytes += meta.len();
            w.push(&IndexEntry::File((rel.to_string(), meta.len(), mtime_ns(meta), meta.mode() & 0o1777)))
        } else {
            Ok(())
        }
    })?;
    w.finish()?;
    Ok((files, bytes))
}

/// Forgets a version's index (the next checkpoint walks the version instead).
pub(crate) fn drop_index(store: &Path, version: u64) {
    let _ = fs::remove_file(index_path(store, version));
}

/// The first line of the save request: its options. The previous version's index follows it as
/// the manifest.
pub(crate) fn save_options() -> Vec<u8> {
    let opts = SaveOptions { skip_under: PROFILES.into(), skip_names: BROWSER_JUNK.iter().map(|s| s.to_string()).collect() };
    let mut out = serde_json::to_vec(&opts).expect("options serialise");
    out.push(b'\n');
    out
}

/// Makes `partial` (it must not exist) and, given the previous version and its index file, fills
/// it with that version's folders (owner-only until [`receive`] sets their modes) and hard links
/// to its files, reading the index as it goes. Symlinks are not copied: a stream always sends
/// them. This runs while the computer starts walking its home, so [`receive`] has only the
/// changes to make.
pub(crate) fn prepare(partial: &Path, prev: Option<(&Path, &Path)>) -> Result<()> {
    fs::DirBuilder::new().mode(0o700).create(partial).map_err(|e| err("creating", partial, e))?;
    let Some((root, index)) = prev else { return Ok(()) };
    for e in IndexReader::open(index)? {
        match e? {
            IndexEntry::Dir(d) => {
                let to = partial.join(&d);
                fs::DirBuilder::new().mode(0o700).create(&to).map_err(|e| err("creating", &to, e))?;
            }
            IndexEntry::File((p, ..)) => {
                let to = partial.join(&p);
                fs::hard_link(root.join(&p), &to).map_err(|e| err("linking", &to, e))?;
            }
        }
    }
    Ok(())
}

/// The order of a walk (and of a home stream, and of an index): a folder's entries right after
/// it, each folder's entries by name (by bytes). Compares two relative paths in it.
pub(crate) fn walk_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    a.split('/').cmp(b.split('/'))
}

/// Whether `p` is `dir` or inside it.
pub(crate) fn within(p: &str, dir: &str) -> bool {
    p.strip_prefix(dir).is_some_and(|r| r.is_empty() || r.starts_with('/'))
}

/// Visits every entry under `root/sub` in walk order ([`walk_cmp`]), with `lstat` metadata;
/// never descends through a symlink. `rel` is relative to `root/sub`. Holds one sorted listing
/// per folder it is in.
pub(crate) fn walk(root: &Path, sub: &str, f: &mut dyn FnMut(&str, &fs::Metadata) -> Result<()>) -> Result<()> {
    let base = if sub.is_empty() { root.to_path_buf() } else { root.join(sub) };
    let listing = |dir: &Path| -> Result<std::vec::IntoIter<String>> {
        let mut names: Vec<String> =
            fs::read_dir(dir).map_err(|e| err("reading", dir, e))?.flatten().filter_map(|e| e.file_name().into_string().ok()).collect();
        names.sort();
        Ok(names.into_iter())
    };
    let mut open = vec![(String::new(), listing(&base)?)];
    while let Some((rel, names)) = open.last_mut() {
        let Some(name) = names.next() else {
            open.pop();
            continue;
        };
        let r = if rel.is_empty() { name } else { format!("{rel}/{name}") };
        let p = base.join(&r);
        let meta = fs::symlink_metadata(&p).map_err(|e| err("reading", &p, e))?;
        f(&r, &meta)?;
        if meta.is_dir() {
            let names = listing(&p)?;
            open.push((r, names));
        }
    }
    Ok(())
}

/// What one received stream held.
#[derive(Debug, Default)]
pub(crate) struct Received {
    pub files: u64,
    pub bytes: u64,
    /// Files written (the others were unchanged and linked from the previous version).
    pub copied: u64,
    pub skipped: Vec<Skipped>,
    /// What changed since the previous version.
    pub changed: Changed,
}

/// Most skipped entries named in a report (the count goes on).
const MAX_SKIPPED_SHOWN: usize = 100;

/// Writes the records from `r` into `partial`, made by [`prepare`] with the same `prev` (the
/// previous version and its index file; `same` may name only that index's files), and the new
/// version's index into `index_to`. Whatever the previous version had where a record lands goes
/// first; what the stream no longer names goes as the stream passes it. `at` is told the path
/// being received, so a stall can name it.
#[cfg(test)]
pub(crate) fn receive(r: &mut impl BufRead, partial: &Path, prev: Option<(&Path, &Path)>, index_to: &Path, at: &mut String) -> Result<Received> {
    receive_within(r, partial, prev, index_to, at, &|| Ok(()))
}

/// Bytes of file data written between two looks at the free disk.
const ROOM_EVERY: u64 = 64 << 20;

/// The previous version's index, read alongside a stream in the same order: what the stream
/// passes without naming is gone.
struct Passing {
    entries: Option<std::iter::Peekable<IndexReader>>,
    /// The entry last removed (or replaced) with everything inside it: the entries inside it that
    /// follow are gone already.
    dead: Option<String>,
}

impl Passing {
    /// Takes the entries before `p` (`None`: all that are left), removing each from `partial`,
    /// and returns the previous version's entry at `p`, if any.
    fn upto(&mut self, p: Option<&str>, partial: &Path, changed: &mut Changed) -> Result<Option<IndexEntry>> {
        use std::cmp::Ordering;
        let Passing { entries, dead } = self;
        let Some(entries) = entries.as_mut() else { return Ok(None) };
        loop {
            let order = match entries.peek() {
                None => return Ok(None),
                Some(Ok(e)) => p.map(|p| walk_cmp(e.path(), p)),
                Some(Err(_)) => None,
            };
            if order == Some(Ordering::Greater) {
                return Ok(None);
            }
            let e = entries.next().expect("peeked")?;
            if order == Some(Ordering::Equal) {
                return Ok(Some(e));
            }
            if let IndexEntry::File((p, ..)) = &e {
                changed.count(p, false, 0);
            }
            remove_passed(dead, e.path(), partial)?;
        }
    }

    /// Removes `p` from `partial` unless it went with an entry removed before it. Only the
    /// store's own folders lead there: inside a removed or replaced entry nothing is left to
    /// remove (and a link the stream put there is never followed).
    fn remove(&mut self, p: &str, partial: &Path) -> Result<()> {
        remove_passed(&mut self.dead, p, partial)
    }
}

fn remove_passed(dead: &mut Option<String>, p: &str, partial: &Path) -> Result<()> {
    if !dead.as_deref().is_some_and(|d| within(p, d)) {
        remove_tree(&partial.join(p))?;
        *dead = Some(p.to_string());
    }
    Ok(())
}

/// [`receive`], asking `room` whether the disk may take more before it starts and after every
/// [`ROOM_EVERY`] bytes written (its error ends the receive).
///
/// Memory stays flat whatever the tree: the stream must come in walk order ([`walk_cmp`]; each
/// path after the last, so none twice), each record inside the folder record it follows, which
/// is open until the stream leaves it; the previous index is read alongside. What is held is the
/// chain of open folders.
pub(crate) fn receive_within(
    r: &mut impl BufRead,
    partial: &Path,
    prev: Option<(&Path, &Path)>,
    index_to: &Path,
    at: &mut String,
    room: &dyn Fn() -> Result<()>,
) -> Result<Received> {
    room()?;
    let mut since = 0u64;
    let bad = |msg: String| EngineError::new(ErrorCode::Provider, format!("bad home stream from the computer: {msg}"));
    let read = |e: io::Error, at: &str| {
        if e.kind() == io::ErrorKind::TimedOut {
            EngineError::new(ErrorCode::TimedOut, format!("the computer stopped sending (stuck on {}): {e}", if at.is_empty() { "its first file" } else { at }))
        } else {
            EngineError::new(ErrorCode::Provider, format!("reading the home stream: {e}"))
        }
    };
    let mut passing = Passing { entries: prev.map(|(_, index)| IndexReader::open(index)).transpose()?.map(Iterator::peekable), dead: None };
    let mut index = IndexWriter::create(index_to)?;
    // The folders the stream is in, outermost first, with their modes and times (set when the
    // stream leaves them: a read-only folder could not be filled).
    let mut open: Vec<(String, u32, i64)> = vec![];
    let leave = |(p, mode, mtime): (String, u32, i64)| -> Result<()> {
        // The owner keeps read and search on every folder of the store, whatever the bot's was (a
        // folder flipped to 000 mid-walk would break every later link and restore).
        let to = partial.join(&p);
        let f = fs::File::open(&to).map_err(|e| err("finishing", &to, e))?;
        f.set_modified(time_of(mtime)).map_err(|e| err("finishing", &to, e))?;
        f.set_permissions(fs::Permissions::from_mode((mode & 0o1777) | 0o500)).map_err(|e| err("finishing", &to, e))
    };
    let mut last: Option<String> = None;
    let mut got = Received::default();
    let mut entries = 0u64;
    loop {
        let rec = read_header(r).map_err(|e| read(e, at))?.ok_or_else(|| bad("it ended without its end record".into()))?;
        if let Record::End { entries: n } = rec {
            if n != entries {
                return Err(bad(format!("its end record counts {n} entries, {entries} came")));
            }
            break;
        }
        entries += 1;
        let p = rec.path().expect("only end has no path").to_string();
        at.clone_from(&p);
        let to = partial.join(&p);
        // A computer names what it skips as it can (a stand-in for a name that is not UTF-8 may
        // sort anywhere): a skipped entry is out of the order, and changes nothing here (what the
        // previous version had there goes as the stream passes it).
        let skipped = matches!(rec, Record::Skipped { .. });
        let found = if skipped {
            None
        } else {
            if last.as_deref().is_some_and(|l| walk_cmp(l, &p) != std::cmp::Ordering::Less) {
                return Err(bad(format!("{p} does not follow its folder, or comes twice")));
            }
            last = Some(p.clone());
            passing.upto(Some(&p), partial, &mut got.changed)?
        };
        // The record's folder must be one this stream made and has not left: nothing is reached
        // through a link. The folders it is not in are left (only after what the previous
        // version had in them went: a skipped record, out of the order, leaves none).
        let parent = p.rsplit_once('/').map(|(d, _)| d);
        if skipped {
            if parent.is_some_and(|parent| !open.iter().any(|(d, ..)| d == parent)) {
                return Err(bad(format!("{p} does not follow its folder, or comes twice")));
            }
        } else {
            while let Some(d) = open.pop_if(|(d, ..)| !parent.is_some_and(|parent| within(parent, d))) {
                leave(d)?;
            }
            if open.last().map(|(d, ..)| d.as_str()) != parent {
                return Err(bad(format!("{p} does not follow its folder, or comes twice")));
            }
        }
        // What the previous version had here goes first, unless it is what stays (a file that
        // becomes a folder or a link is counted removed; one written again, changed).
        let changed = &mut got.changed;
        let mut clear = |keep_dir: bool, file: bool| -> Result<()> {
            match &found {
                Some(IndexEntry::Dir(_)) if keep_dir => Ok(()),
                Some(e) => {
                    if matches!(e, IndexEntry::File(_)) && !file {
                        changed.count(&p, false, 0);
                    }
                    passing.remove(&p, partial)
                }
                None => Ok(()),
            }
        };
        match rec {
            Record::Dir { mode, mtime, .. } => {
                clear(true, false)?;
                if !matches!(found, Some(IndexEntry::Dir(_))) {
                    fs::DirBuilder::new().mode(0o700).create(&to).map_err(|e| err("creating", &to, e))?;
                }
                index.push(&IndexEntry::Dir(p.clone()))?;
                open.push((p, mode, mtime));
            }
            Record::Link { target, mtime, .. } => {
                clear(false, false)?;
                std::os::unix::fs::symlink(&target, &to).map_err(|e| err("writing", &to, e))?;
                link_mtime(&to, mtime).map_err(|e| err("writing", &to, e))?;
            }
            Record::Same { .. } => {
                // Already linked by `prepare`.
                let Some(IndexEntry::File(e)) = found else { return Err(bad(format!("{p} is not a file of the previous version"))) };
                got.files += 1;
                got.bytes += e.1;
                index.push(&IndexEntry::File(e))?;
            }
            Record::File { mode, mtime, size, data, more, .. } => {
                clear(false, true)?;
                let mut f = fs::File::options().write(true).create_new(true).mode(0o600).open(&to).map_err(|e| err("writing", &to, e))?;
                let mut written = write_extents(r, &mut f, &data, &to, &p, at, (&mut since, room))?;
                let (mut more, mut file) = (more, FileData::new(&p, size, &data));
                while more {
                    let rec = read_header(r).map_err(|e| read(e, at))?;
                    let Some(Record::Extents { p: q, data, more: m }) = rec else {
                        return Err(bad(format!("the rest of {p} did not follow it")));
                    };
                    file.more(&q, &data).map_err(|e| bad(e.to_string()))?;
                    written += write_extents(r, &mut f, &data, &to, &p, at, (&mut since, room))?;
                    more = m;
                }
                f.set_len(size).map_err(|e| err("writing", &to, e))?;
                // The owner can always read what the store keeps (a restore reads it); the index
                // holds the real mode.
                f.set_permissions(fs::Permissions::from_mode((mode & 0o1777) | 0o400)).map_err(|e| err("writing", &to, e))?;
                f.set_modified(time_of(mtime)).map_err(|e| err("writing", &to, e))?;
                got.files += 1;
                got.bytes += size;
                got.copied += 1;
                got.changed.count(&p, true, written);
                index.push(&IndexEntry::File((p, size, mtime, mode & 0o1777)))?;
            }
            Record::Hardlink { to: first, mode, .. } => {
                // `first` came earlier: everything before this record is as the stream made it,
                // so a regular file reached through real folders only is one of its files.
                let no_file = || bad(format!("{p} is a hard link to {first}, no file of this stream before it"));
                let dir = first.rsplit_once('/').map_or("", |(d, _)| d);
                if walk_cmp(&first, &p) != std::cmp::Ordering::Less || find_dir(partial, dir)? != Found::Folder {
                    return Err(no_file());
                }
                let from = partial.join(&first);
                let m = fs::symlink_metadata(&from).ok().filter(|m| m.is_file()).ok_or_else(no_file)?;
                clear(false, true)?;
                fs::hard_link(&from, &to).map_err(|e| err("writing", &to, e))?;
                let entry = (p.clone(), m.len(), mtime_ns(&m), mode.unwrap_or(m.mode()) & 0o1777);
                if found.is_none_or(|e| e != IndexEntry::File(entry.clone())) {
                    got.changed.count(&p, true, 0);
                }
                got.files += 1;
                got.bytes += entry.1;
                index.push(&IndexEntry::File(entry))?;
            }
            Record::Extents { p, .. } => return Err(bad(format!("extents of {p} came without their file"))),
            Record::Skipped { why, .. } => {
                if got.skipped.len() < MAX_SKIPPED_SHOWN {
                    got.skipped.push(Skipped { path: p, why });
                }
            }
            Record::End { .. } => unreachable!("handled above"),
        }
    }
    // What the previous version had after the stream's last entry goes; then the folders still
    // open are left, innermost first.
    passing.upto(None, partial, &mut got.changed)?;
    while let Some(d) = open.pop() {
        leave(d)?;
    }
    index.finish()?;
    Ok(got)
}

/// Writes a file's data extents from `r` into `f`, leaving blocks of zeros unwritten (holes on
/// the host, whatever the computer sent), and asks `room` again every [`ROOM_EVERY`] bytes
/// written. Returns the bytes received.
fn write_extents(
    r: &mut impl BufRead,
    f: &mut fs::File,
    data: &[(u64, u64)],
    to: &Path,
    p: &str,
    at: &str,
    (since, room): (&mut u64, &dyn Fn() -> Result<()>),
) -> Result<u64> {
    const BLOCK: usize = 64 * 1024;
    let mut buf = vec![0u8; BLOCK];
    let mut total = 0;
    for &(off, len) in data {
        let mut done = 0u64;
        while done < len {
            let want = (len - done).min(BLOCK as u64) as usize;
            let n = r.read(&mut buf[..want]).map_err(|e| {
                if e.kind() == io::ErrorKind::TimedOut {
                    EngineError::new(ErrorCode::TimedOut, format!("the computer stopped sending (stuck on {at}): {e}"))
                } else {
                    EngineError::new(ErrorCode::Provider, format!("reading the home stream: {e}"))
                }
            })?;
            if n == 0 {
                return Err(EngineError::new(ErrorCode::Provider, format!("bad home stream from the computer: {p} ended after {done} of {len} bytes")));
            }
            if buf[..n].iter().any(|&b| b != 0) {
                f.write_all_at(&buf[..n], off + done).map_err(|e| err("writing", to, e))?;
                *since += n as u64;
                if *since >= ROOM_EVERY {
                    *since = 0;
                    room()?;
                }
            }
            done += n as u64;
        }
        total += len;
    }
    Ok(total)
}

/// Whether the disk holding `dir` has more than `keep` bytes free (for this user), else a clear
/// error with the numbers.
pub(crate) fn check_free(dir: &Path, keep: u64) -> Result<()> {
    let free = free_bytes(dir)?;
    if free >= keep {
        return Ok(());
    }
    let gib = |b: u64| format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64);
    Err(EngineError::new(
        ErrorCode::DiskFull,
        format!(
            "the disk holding {} has {} free and checkpoints keep {} free (Settings → Versions): free some space, or keep less free; the previous version is kept",
            dir.display(),
            gib(free),
            gib(keep)
        ),
    ))
}

fn free_bytes(dir: &Path) -> Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(|e| err("reading", dir, io::Error::other(e)))?;
    // SAFETY: statvfs fills the struct we pass; the path is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(err("reading", dir, io::Error::last_os_error()));
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Flushes the file system holding `dir` to disk.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    let f = fs::File::open(dir).map_err(|e| err("syncing", dir, e))?;
    // SAFETY: syncfs on a valid descriptor we own.
    let rc = unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&f)) };
    if rc != 0 {
        return Err(err("syncing", dir, io::Error::last_os_error()));
    }
    Ok(())
}

/// Makes a finished `partial` version `v<N>` (with its index file `index` and meta) and `current` (under the
/// store's lock), then moves the versions `keep` no longer keeps at `meta.at` to `trash/` for
/// [`sweep`]. A reader sees the old version or the new one, never half of one.
pub(crate) fn commit(store: &Path, partial: &Path, index: &Path, meta: &Meta, keep: Retention) -> Result<()> {
    let version = meta.version;
    let ip = index_path(store, version);
    fs::rename(index, &ip).map_err(|e| err("writing", &ip, e))?;
    versions::write_meta(store, meta)?;
    // One sync for the whole file system: the version, its index and meta.
    sync_dir(partial)?;
    let done = store.join(format!("v{version}"));
    fs::rename(partial, &done).map_err(|e| err("finishing", &done, e))?;
    let link = store.join("current.new");
    let _ = fs::remove_file(&link);
    std::os::unix::fs::symlink(format!("v{version}"), &link).map_err(|e| err("writing", &link, e))?;
    fs::rename(&link, store.join("current")).map_err(|e| err("switching", store, e))?;
    sync_dir(store)?;
    // Only the current version's index is read (by the next checkpoint).
    for e in fs::read_dir(store).map_err(|e| err("reading", store, e))?.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.strip_prefix('v').and_then(|r| r.strip_suffix(".index")).and_then(|n| n.parse::<u64>().ok()).is_some_and(|n| n != version) {
            let _ = fs::remove_file(e.path());
        }
    }
    // Versions the retention no longer keeps go (a reader still in one keeps its open files): one
    // rename each now, the removal after the checkpoint returned.
    let all: Vec<(u64, i64)> = versions::list(store)?.into_iter().map(|m| (m.version, m.at)).collect();
    let kept = versions::kept(&all, version, meta.at, keep);
    let trash = store.join(TRASH);
    fs::DirBuilder::new().mode(0o700).recursive(true).create(&trash).map_err(|e| err("creating", &trash, e))?;
    let stamp = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
    for (n, _) in all.iter().filter(|(n, _)| !kept.contains(n)) {
        let to = trash.join(format!("v{n}.{stamp}"));
        fs::rename(store.join(format!("v{n}")), &to).map_err(|e| err("removing", &to, e))?;
        let _ = fs::remove_file(versions::meta_path(store, *n));
    }
    Ok(())
}

/// What `root/sub` is, judged one component at a time without following any link (a bot may have
/// made its own folder, `.browser-profiles` or its profile one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// A real folder, with real folders all the way.
    Folder,
    Missing,
    /// A link or a file on the way.
    Other,
}

pub(crate) fn find_dir(root: &Path, sub: &str) -> Result<Found> {
    let mut p = root.to_path_buf();
    for c in sub.split('/').filter(|c| !c.is_empty()) {
        p.push(c);
        match fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Ok(Found::Other),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Found::Missing),
            Err(e) => return Err(err("reading", &p, e)),
        }
    }
    Ok(Found::Folder)
}

/// Streams the tree `root/sub` (a real folder: see [`find_dir`]) as records to `w`, then `end`.
/// `keep(rel)` chooses what goes (a folder left out goes with everything in it). Sparse files are sent by their data extents.
pub(crate) fn send_tree(root: &Path, sub: &str, keep: &dyn Fn(&str) -> bool, w: &mut impl Write) -> Result<u64> {
    let base = if sub.is_empty() { root.to_path_buf() } else { root.join(sub) };
    let mut entries = 0u64;
    // The folder last left out: in walk order, everything inside it comes right after it.
    let mut left_out: Option<String> = None;
    // Files of this tree with more than one name in it, by inode: the first name sent. (Every
    // version shares inodes with the others, so only names within this tree count.)
    let mut names: HashMap<(u64, u64), String> = HashMap::new();
    let io_err = |e: io::Error| EngineError::new(ErrorCode::Provider, format!("sending the home stream: {e}"));
    walk(&base, "", &mut |rel, meta| {
        if left_out.as_deref().is_some_and(|d| within(rel, d)) {
            return Ok(());
        }
        if !keep(rel) {
            if meta.is_dir() {
                left_out = Some(rel.to_string());
            }
            return Ok(());
        }
        let p = base.join(rel);
        let rec = if meta.is_dir() {
            Record::Dir { p: rel.into(), mode: meta.mode() & 0o1777, mtime: mtime_ns(meta) }
        } else if meta.file_type().is_symlink() {
            let target = fs::read_link(&p).map_err(|e| err("reading", &p, e))?;
            let Some(target) = target.to_str() else { return Ok(()) };
            Record::Link { p: rel.into(), target: target.into(), mtime: mtime_ns(meta) }
        } else if meta.is_file() && meta.nlink() > 1 && names.contains_key(&(meta.dev(), meta.ino())) {
            Record::Hardlink { p: rel.into(), to: names[&(meta.dev(), meta.ino())].clone(), mode: Some(meta.mode() & 0o1777) }
        } else if meta.is_file() {
            if meta.nlink() > 1 {
                names.insert((meta.dev(), meta.ino()), rel.to_string());
            }
            let mut f = fs::File::options().read(true).custom_flags(libc::O_NOFOLLOW).open(&p).map_err(|e| err("reading", &p, e))?;
            let data = extents(&f, meta.len());
            for rec in file_records(rel, meta.mode() & 0o1777, mtime_ns(meta), meta.len(), &data, SEND_EXTENTS) {
                w.write_all(&rec.line()).map_err(io_err)?;
                let (Record::File { data, .. } | Record::Extents { data, .. }) = rec else { unreachable!("file records only") };
                for (off, len) in data {
                    f.seek(SeekFrom::Start(off)).map_err(|e| err("reading", &p, e))?;
                    let n = io::copy(&mut (&mut f).take(len), w).map_err(io_err)?;
                    if n != len {
                        // Versions never change; a short read means the disk failed.
                        return Err(err("reading", &p, io::Error::other("the file is shorter than it was")));
                    }
                }
            }
            entries += 1;
            return Ok(());
        } else {
            return Ok(());
        };
        w.write_all(&rec.line()).map_err(io_err)?;
        entries += 1;
        Ok(())
    })?;
    w.write_all(&Record::End { entries }.line()).map_err(io_err)?;
    w.flush().map_err(io_err)?;
    Ok(entries)
}

/// Most extents one record lists from here (the rest go in `extents` records): with 4 KiB of path
/// it stays well inside a header line.
const SEND_EXTENTS: usize = 256;

/// A file's data extents (holes left out), or the whole file where the file system cannot say.
fn extents(f: &fs::File, size: u64) -> Vec<(u64, u64)> {
    use std::os::fd::AsRawFd;
    if size == 0 {
        return vec![];
    }
    let fd = f.as_raw_fd();
    let mut out = vec![];
    let mut pos: i64 = 0;
    while (pos as u64) < size {
        // SAFETY: lseek on a descriptor we own; errors are checked.
        let start = unsafe { libc::lseek(fd, pos, libc::SEEK_DATA) };
        if start < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO) {
                break; // only a hole is left
            }
            return vec![(0, size)];
        }
        // SAFETY: as above.
        let end = unsafe { libc::lseek(fd, start, libc::SEEK_HOLE) };
        if end < 0 {
            return vec![(0, size)];
        }
        let end = (end as u64).min(size);
        if end > start as u64 {
            out.push((start as u64, end - start as u64));
        }
        pos = end as i64;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(p: &Path, s: &str) {
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, s).unwrap();
    }

    fn entries_of(index: &Path) -> Vec<IndexEntry> {
        IndexReader::open(index).unwrap().map(Result::unwrap).collect()
    }

    fn file(p: &str, m: &fs::Metadata) -> IndexEntry {
        IndexEntry::File((p.into(), m.len(), mtime_ns(m), m.mode() & 0o1777))
    }

    /// A version streamed out and received again is the same tree, modes, times, links and holes.
    #[test]
    fn a_sent_tree_is_received_whole_and_read_only_parts_stay_read_only() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        write(&src.join("repo/.git/objects/ab/cdef"), "blob");
        fs::set_permissions(src.join("repo/.git/objects/ab/cdef"), fs::Permissions::from_mode(0o444)).unwrap();
        fs::set_permissions(src.join("repo/.git/objects/ab"), fs::Permissions::from_mode(0o555)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", src.join("repo/escape")).unwrap();
        let sparse = fs::File::create(src.join("sparse.img")).unwrap();
        sparse.set_len(64 << 20).unwrap();
        let mut stream = vec![];
        send_tree(&src, "", &|_| true, &mut stream).unwrap();
        assert!(stream.len() < 1 << 20, "holes are not sent ({} bytes)", stream.len());

        let got = t.path().join("got");
        let mut at = String::new();
        prepare(&got, None).unwrap();
        let r = receive(&mut &stream[..], &got, None, &t.path().join("got.index"), &mut at).unwrap();
        assert_eq!((r.files, r.copied), (2, 2));
        assert_eq!(fs::read_to_string(got.join("repo/.git/objects/ab/cdef")).unwrap(), "blob");
        assert_eq!(fs::symlink_metadata(got.join("repo/.git/objects/ab")).unwrap().mode() & 0o777, 0o555);
        assert_eq!(fs::symlink_metadata(got.join("repo/.git/objects/ab/cdef")).unwrap().mode() & 0o777, 0o444);
        assert_eq!(fs::read_link(got.join("repo/escape")).unwrap(), Path::new("/etc/passwd"));
        let m = fs::metadata(got.join("sparse.img")).unwrap();
        assert_eq!(m.len(), 64 << 20);
        assert!(m.blocks() < 1024, "the sparse file stays sparse ({} blocks)", m.blocks());
        assert_eq!(
            mtime_ns(&fs::metadata(src.join("repo/.git/objects/ab/cdef")).unwrap()),
            mtime_ns(&fs::metadata(got.join("repo/.git/objects/ab/cdef")).unwrap())
        );
        remove_tree(&got).unwrap();
        remove_tree(&src).unwrap();
        assert!(!got.exists());
    }

    /// A hostile stream cannot write through a link it made, claim files it was not told of,
    /// or end early.
    #[test]
    fn hostile_streams_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let lines = |recs: &[&str]| recs.iter().map(|r| format!("{r}\n")).collect::<String>().into_bytes();
        let cases: &[(&[&str], &str)] = &[
            (
                &[
                    r#"{"t":"link","p":"a","target":"/tmp","mtime":0}"#,
                    r#"{"t":"file","p":"a/x","mode":420,"mtime":0,"size":0,"data":[]}"#,
                    r#"{"t":"end","entries":2}"#,
                ],
                "does not follow its folder",
            ),
            (&[r#"{"t":"same","p":"passwd"}"#, r#"{"t":"end","entries":1}"#], "not a file of the previous version"),
            (&[r#"{"t":"dir","p":"a","mode":493,"mtime":0}"#], "without its end"),
            (&[r#"{"t":"file","p":"f","mode":420,"mtime":0,"size":10,"data":[[0,10]]}"#, "abc"], "ended after"),
            (&[r#"{"t":"dir","p":"a","mode":493,"mtime":0}"#, r#"{"t":"dir","p":"a","mode":493,"mtime":0}"#, r#"{"t":"end","entries":2}"#], "comes twice"),
            (&[r#"{"t":"end","entries":3}"#], "counts 3"),
            (&[r#"{"t":"dir","p":"d","mode":493,"mtime":0}"#, r#"{"t":"hardlink","p":"h","to":"d"}"#, r#"{"t":"end","entries":2}"#], "no file of this stream"),
            (&[r#"{"t":"hardlink","p":"h","to":"../../etc/passwd"}"#, r#"{"t":"end","entries":1}"#], "not a plain relative path"),
            // A link made by the stream is never a way to a file of this machine.
            (
                &[r#"{"t":"link","p":"a","target":"/etc","mtime":0}"#, r#"{"t":"hardlink","p":"z","to":"a/passwd"}"#, r#"{"t":"end","entries":2}"#],
                "no file of this stream before it",
            ),
            // Out of walk order, or a name twice (the receiver holds only the folders it is in).
            (
                &[
                    r#"{"t":"file","p":"b","mode":420,"mtime":0,"size":0,"data":[]}"#,
                    r#"{"t":"file","p":"a","mode":420,"mtime":0,"size":0,"data":[]}"#,
                    r#"{"t":"end","entries":2}"#,
                ],
                "does not follow its folder, or comes twice",
            ),
            (
                &[
                    r#"{"t":"dir","p":"d","mode":493,"mtime":0}"#,
                    r#"{"t":"file","p":"e","mode":420,"mtime":0,"size":0,"data":[]}"#,
                    r#"{"t":"file","p":"d/late","mode":420,"mtime":0,"size":0,"data":[]}"#,
                    r#"{"t":"end","entries":3}"#,
                ],
                "does not follow its folder",
            ),
            (
                &[
                    r#"{"t":"file","p":"f","mode":420,"mtime":0,"size":20,"data":[[0,2]],"more":true}"#,
                    "x",
                    r#"{"t":"dir","p":"d","mode":493,"mtime":0}"#,
                    r#"{"t":"end","entries":2}"#,
                ],
                "the rest of f did not follow it",
            ),
        ];
        for (i, (recs, want)) in cases.iter().enumerate() {
            let dest = t.path().join(format!("v{i}"));
            prepare(&dest, None).unwrap();
            let e = receive(&mut &lines(recs)[..], &dest, None, &t.path().join(format!("v{i}.index")), &mut String::new()).unwrap_err();
            assert!(e.message.contains(want), "case {i}: {e}");
        }
    }

    /// A file with more extents than a record holds goes in several records; every byte comes
    /// through and no hole is written on the receiving side (nor a block of zeros sent as data).
    #[test]
    fn many_extents_go_in_several_records_keep_every_byte_and_every_hole() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("holey");
        let f = fs::File::create(&p).unwrap();
        f.set_len(3000 * 65536).unwrap();
        for i in 0..3000u64 {
            std::os::unix::fs::FileExt::write_at(&f, &[1 + (i % 200) as u8], i * 65536 + (i % 7) * 100).unwrap();
        }
        // And a data block of zeros: sent, but never written.
        std::os::unix::fs::FileExt::write_at(&f, &[0u8; 65536], 3000 * 65536).unwrap();
        let ex = extents(&f, 3001 * 65536);
        assert!(ex.len() > SEND_EXTENTS && ex.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0), "{}", ex.len());
        let mut stream = vec![];
        send_tree(t.path(), "", &|_| true, &mut stream).unwrap();
        assert!(String::from_utf8_lossy(&stream).contains(r#"{"t":"extents","p":"holey""#));
        let got = t.path().join("got");
        prepare(&got, None).unwrap();
        receive(&mut &stream[..], &got, None, &t.path().join("got.index"), &mut String::new()).unwrap();
        assert_eq!(fs::read(got.join("holey")).unwrap(), fs::read(&p).unwrap());
        let (sent, kept) = (fs::metadata(&p).unwrap().blocks(), fs::metadata(got.join("holey")).unwrap().blocks());
        assert!(kept < sent, "the zeros stay a hole: {kept} blocks for {sent}");
    }

    /// A disk that would fill: the receive asks before it starts and every 64 MiB written, and
    /// stops at the first no.
    #[test]
    fn a_receive_stops_when_the_disk_has_no_room() {
        let t = tempfile::tempdir().unwrap();
        let size = 100u64 << 20;
        let mut stream = Record::File { p: "big".into(), mode: 0o644, mtime: 0, size, data: vec![(0, size)], more: false }.line();
        stream.extend(std::iter::repeat_n(7u8, size as usize));
        stream.extend(Record::End { entries: 1 }.line());
        let asked = std::cell::Cell::new(0);
        let room = || {
            asked.set(asked.get() + 1);
            if asked.get() > 1 {
                Err(EngineError::new(ErrorCode::DiskFull, "no room"))
            } else {
                Ok(())
            }
        };
        let dest = t.path().join("v1");
        prepare(&dest, None).unwrap();
        let e = receive_within(&mut &stream[..], &dest, None, &t.path().join("v1.index"), &mut String::new(), &room).unwrap_err();
        assert_eq!((e.code, asked.get()), (ErrorCode::DiskFull, 2), "asked at the start and after 64 MiB");
        assert!(check_free(t.path(), 0).is_ok());
        let e = check_free(t.path(), u64::MAX).unwrap_err();
        assert!(e.message.contains("GiB free and checkpoints keep"), "{e}");
    }

    /// Hard links stay links: sent once and named again, received as one file with two names.
    #[test]
    fn hard_links_go_as_one_file_with_more_names() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        write(&src.join("a/one"), "shared bytes");
        fs::hard_link(src.join("a/one"), src.join("two")).unwrap();
        let mut stream = vec![];
        send_tree(&src, "", &|_| true, &mut stream).unwrap();
        // (In walk order `a/one` is sent first.)
        assert!(String::from_utf8_lossy(&stream).contains(r#"{"t":"hardlink","p":"two","to":"a/one","mode":420}"#));
        let got = t.path().join("got");
        prepare(&got, None).unwrap();
        let index = t.path().join("got.index");
        let r = receive(&mut &stream[..], &got, None, &index, &mut String::new()).unwrap();
        let (one, two) = (fs::metadata(got.join("a/one")).unwrap(), fs::metadata(got.join("two")).unwrap());
        assert_eq!((one.ino(), fs::read_to_string(got.join("two")).unwrap().as_str()), (two.ino(), "shared bytes"));
        assert_eq!((r.files, r.copied), (2, 1));
        assert_eq!(entries_of(&index), [IndexEntry::Dir("a".into()), file("a/one", &one), file("two", &two)]);
    }

    /// A computer that stops sending mid-file: the checkpoint gives up and names the file.
    #[tokio::test]
    async fn a_stalled_stream_names_the_file_it_was_stuck_on() {
        use tokio::io::AsyncWriteExt;
        let t = tempfile::tempdir().unwrap();
        let (rx, mut tx) = tokio::io::duplex(1024);
        tx.write_all(&Record::File { p: "big.bin".into(), mode: 0o644, mtime: 0, size: 10, data: vec![(0, 10)], more: false }.line()).await.unwrap();
        tx.write_all(b"abc").await.unwrap();
        let records = tokio_util::io::SyncIoBridge::new(crate::checkpoint::Bounded::new(rx, Duration::from_millis(300), Duration::from_secs(60)));
        let dest = t.path().join("v1.partial");
        let e = tokio::task::spawn_blocking(move || {
            let mut r = io::BufReader::new(records);
            prepare(&dest, None).unwrap();
            receive(&mut r, &dest, None, &dest.with_extension("index"), &mut String::new())
        })
        .await
        .unwrap()
        .unwrap_err();
        assert!(e.message.contains("stuck on big.bin") && e.message.contains("nothing came for"), "{}", e.message);
        drop(tx);
    }

    #[test]
    fn tidy_removes_what_an_interrupted_checkpoint_left() {
        let t = tempfile::tempdir().unwrap();
        let store = t.path();
        for d in ["v1", "v2", "v3.partial"] {
            fs::create_dir(store.join(d)).unwrap();
        }
        for f in ["v1.index", "v2.index"] {
            fs::write(store.join(f), "{}").unwrap();
        }
        std::os::unix::fs::symlink("v1", store.join("current")).unwrap();
        tidy(store).unwrap();
        assert!(store.join("v1").exists() && store.join("v1.index").exists());
        for gone in ["v2", "v2.index", "v3.partial"] {
            assert!(!store.join(gone).exists(), "{gone}");
        }
    }

    /// A skipped record (a stand-in name sorts anywhere) leaves no folder behind: what the previous
    /// version had in a read-only folder still goes before the folder is made read-only.
    #[test]
    fn a_skipped_record_leaves_no_folder_before_its_old_entries_went() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        write(&src.join("d/s/old"), "old");
        write(&src.join("d/z"), "z");
        let mut stream = vec![];
        send_tree(&src, "", &|_| true, &mut stream).unwrap();
        let (v1, i1) = (t.path().join("v1"), t.path().join("v1.index"));
        prepare(&v1, None).unwrap();
        receive(&mut &stream[..], &v1, None, &i1, &mut String::new()).unwrap();
        let recs = [
            Record::Dir { p: "d".into(), mode: 0o755, mtime: 0 }.line(),
            Record::Dir { p: "d/s".into(), mode: 0o555, mtime: 0 }.line(),
            Record::Skipped { p: "d/y".into(), why: "name is not UTF-8".into() }.line(),
            Record::Same { p: "d/z".into() }.line(),
            Record::End { entries: 4 }.line(),
        ];
        let (v2, i2) = (t.path().join("v2"), t.path().join("v2.index"));
        prepare(&v2, Some((&v1, &i1))).unwrap();
        let got = receive(&mut &recs.concat()[..], &v2, Some((&v1, &i1)), &i2, &mut String::new()).unwrap();
        assert_eq!(tree(&v2), ["d 755 dir", "d/s 555 dir", "d/z 644 z"]);
        assert_eq!((got.changed.home.removed, got.skipped.len()), (1, 1));
    }

    fn tree(root: &Path) -> Vec<String> {
        let mut out = vec![];
        walk(root, "", &mut |rel, m| {
            let what = if m.is_dir() {
                "dir".to_string()
            } else if m.file_type().is_symlink() {
                format!("-> {}", fs::read_link(root.join(rel)).unwrap().display())
            } else {
                fs::read_to_string(root.join(rel)).unwrap()
            };
            out.push(format!("{rel} {:o} {what}", m.mode() & 0o7777));
            Ok(())
        })
        .unwrap();
        out
    }

    /// A version made from the previous one by links changes only what the stream says, drops what
    /// it no longer names (never through a link the stream put in its way), and leaves the
    /// previous version as it was; the next one starts from the index the receive wrote, and the
    /// replaced version goes with the sweep.
    #[test]
    fn a_version_prepared_from_the_previous_one_holds_exactly_the_new_tree() {
        let t = tempfile::tempdir().unwrap();
        let store = t.path().join("store");
        let src = t.path().join("src");
        for f in ["keep", "change", "gone", "old-dir/x", "dir-to-file/y", "file-to-dir", "to-link/z", "ro/kept", "skip-me"] {
            write(&src.join(f), f);
        }
        fs::set_permissions(src.join("ro"), fs::Permissions::from_mode(0o555)).unwrap();
        // What `to-link` will point at: the previous `to-link/z` goes, this `z` stays.
        let outside = t.path().join("outside");
        write(&outside.join("z"), "not the store's");
        let mut stream = vec![];
        send_tree(&src, "", &|_| true, &mut stream).unwrap();
        lock_store(&store).unwrap();
        let v1 = store.join("v1.partial");
        prepare(&v1, None).unwrap();
        let got = receive(&mut &stream[..], &v1, None, &partial_index_path(&store, 1), &mut String::new()).unwrap();
        let meta = |version: u64, at: i64, got: &Received| Meta {
            version,
            at,
            why: versions::Why::Asked,
            files: got.files,
            bytes: got.bytes,
            changed: got.changed.clone(),
        };
        let keep = Retention { all_hours: 48, daily_days: 0 };
        commit(&store, &v1, &partial_index_path(&store, 1), &meta(1, 0, &got), keep).unwrap();
        let before = tree(&store.join("v1"));

        let (n, root) = current_version(&store).unwrap();
        let index = index_file(&store, n, &root).unwrap();
        assert_eq!(entries_of(&index).iter().filter(|e| matches!(e, IndexEntry::File(_))).count(), 9);
        let f = |p: &str, body: &str| {
            let mut v = Record::File { p: p.into(), mode: 0o640, mtime: 7, size: body.len() as u64, data: vec![(0, body.len() as u64)], more: false }.line();
            v.extend_from_slice(body.as_bytes());
            v
        };
        let d = |p: &str, mode: u32| Record::Dir { p: p.into(), mode, mtime: 9 }.line();
        let same = |p: &str| Record::Same { p: p.into() }.line();
        // In walk order.
        let recs = [
            f("change", "new"),
            f("dir-to-file", "now a file"),
            d("file-to-dir", 0o755),
            f("file-to-dir/in", "inside"),
            same("keep"),
            f("new", "fresh"),
            d("ro", 0o555),
            same("ro/kept"),
            Record::Skipped { p: "skip-me".into(), why: "fifo".into() }.line(),
            Record::Link { p: "to-link".into(), target: outside.to_str().unwrap().into(), mtime: 0 }.line(),
            Record::End { entries: 10 }.line(),
        ];
        let v2 = store.join("v2.partial");
        prepare(&v2, Some((&root, &index))).unwrap();
        let got = receive(&mut &recs.concat()[..], &v2, Some((&root, &index)), &partial_index_path(&store, 2), &mut String::new()).unwrap();
        assert_eq!((got.files, got.copied, got.skipped.len()), (6, 4, 1));
        assert_eq!(
            tree(&v2),
            [
                "change 640 new",
                "dir-to-file 640 now a file",
                "file-to-dir 755 dir",
                "file-to-dir/in 640 inside",
                "keep 644 keep",
                "new 640 fresh",
                "ro 555 dir",
                "ro/kept 644 ro/kept",
                &format!("to-link 777 -> {}", outside.display()),
            ]
        );
        assert_eq!(fs::read_to_string(outside.join("z")).unwrap(), "not the store's", "nothing is removed through a link");
        assert_eq!(fs::symlink_metadata(v2.join("keep")).unwrap().ino(), fs::symlink_metadata(root.join("keep")).unwrap().ino());
        assert_eq!(tree(&root), before, "the previous version is untouched");

        // Written: change, dir-to-file, file-to-dir/in, new; removed: dir-to-file/y, file-to-dir,
        // gone, old-dir/x, skip-me, to-link/z.
        assert_eq!(got.changed.home, versions::Changes { written: 4, removed: 6, bytes: 3 + 10 + 6 + 5 });
        // A day later v1 is kept (every version for 48 hours); three days later it goes.
        let v2_meta = meta(2, 24 * 3600 * 1000, &got);
        commit(&store, &v2, &partial_index_path(&store, 2), &v2_meta, keep).unwrap();
        assert!(store.join("v1").exists() && !store.join("v1.index").exists() && store.join("v2.index").exists());
        assert_eq!(versions::list(&store).unwrap().iter().map(|m| (m.version, m.at)).collect::<Vec<_>>(), [(1, 0), (2, 24 * 3600 * 1000)]);
        let index2 = index_file(&store, 2, &store.join("v2")).unwrap();
        let written = entries_of(&index2);
        let v3 = store.join("v3.partial");
        prepare(&v3, Some((&store.join("v2"), &index2))).unwrap();
        fs::copy(&index2, partial_index_path(&store, 3)).unwrap();
        commit(&store, &v3, &partial_index_path(&store, 3), &meta(3, 3 * 24 * 3600 * 1000, &got), keep).unwrap();
        assert!(!store.join("v1").exists() && !store.join("v1.meta").exists() && store.join("v2").exists(), "v1 is over 48 hours old");
        assert_eq!(fs::read_dir(store.join(TRASH)).unwrap().count(), 1);
        sweep(&store).unwrap();
        assert_eq!(fs::read_dir(store.join(TRASH)).unwrap().count(), 0);
        let dirs: Vec<&str> = written.iter().filter(|e| matches!(e, IndexEntry::Dir(_))).map(IndexEntry::path).collect();
        assert_eq!(dirs, ["file-to-dir", "ro"]);
        assert_eq!(written.len(), 8);
        // Without its index file (or with one from before this format) a version is walked, to
        // the same entries.
        drop_index(&store, 2);
        assert_eq!(entries_of(&index_file(&store, 2, &store.join("v2")).unwrap()), written);
        fs::write(index_path(&store, 2), r#"{"dirs":[],"files":[]}"#).unwrap();
        assert_eq!(entries_of(&index_file(&store, 2, &store.join("v2")).unwrap()), written);
    }
}
