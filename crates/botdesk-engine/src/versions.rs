//! The history of a home store (`DATA_DIR/homes/<home-key>/`): every checkpoint version `v<N>` is
//! kept, unchanged files shared between versions as hard links, with `v<N>.meta` saying what it is:
//! when it was made, why (a run ended, a stop, a restore…) and what changed. All blocking file
//! work, like `home_store`.
//!
//! - [`kept`] is the retention: every version younger than `all_hours`, then the newest of each
//!   day for `daily_days`, and always the current one. [`home_store::commit`] applies it.
//! - [`derive`] makes a new version from the current one with one path (or everything) as it was
//!   in an older version: a restore done in the store alone, without the computer.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::home_store::{self, err, IndexEntry, IndexReader};
use crate::Result;

/// Why a version was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Why {
    /// A run ended.
    Run {
        run_id: String,
    },
    /// A run was about to start (the version "Undo this run" goes back to).
    BeforeRun {
        run_id: String,
    },
    Stop,
    Suspend,
    Destroy,
    /// Asked for (`botdesk computer checkpoint`).
    Asked,
    /// A bot moved between its Team and Private computers.
    Switch,
    /// The present, saved before a restore (so the restore can be undone).
    BeforeRestore,
    /// A restore of `path` ("": everything) as it was in version `from`.
    Restored {
        from: u64,
        path: String,
    },
    /// A run's file changes undone.
    Undone {
        run_id: String,
    },
    /// Made by a Botdesk that kept no history.
    Earlier,
}

impl Why {
    /// One line for a person looking at `folder` of the home ("": all of it).
    pub fn describe(&self, folder: &str) -> String {
        let run = |id: &str| id.chars().take(8).collect::<String>();
        match self {
            Why::Run { run_id } => format!("after run {}", run(run_id)),
            Why::BeforeRun { run_id } => format!("before run {}", run(run_id)),
            Why::Stop => "computer stopped".into(),
            Why::Suspend => "computer suspended (idle)".into(),
            Why::Destroy => "computer destroyed".into(),
            Why::Asked => "checkpoint".into(),
            Why::Switch => "bot moved between computers".into(),
            Why::BeforeRestore => "before a restore".into(),
            Why::Restored { from, path } => {
                let inside = if folder.is_empty() { Some(path.as_str()) } else { path.strip_prefix(folder).map(|r| r.trim_start_matches('/')) };
                match inside {
                    Some("") => format!("restored v{from}"),
                    Some(p) => format!("restored {p} from v{from}"),
                    None => format!("restored {path} from v{from}"),
                }
            }
            Why::Undone { run_id } => format!("undid run {}", run(run_id)),
            Why::Earlier => "earlier checkpoint".into(),
        }
    }
}

/// What changed in a version since the one before it: regular files written (new or changed) and
/// removed, and the bytes written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
pub struct Changes {
    pub written: u64,
    pub removed: u64,
    pub bytes: u64,
}

impl Changes {
    pub fn none(&self) -> bool {
        self.written == 0 && self.removed == 0
    }
}

/// What changed in a version: in the whole home, and in each bot's folder of a Team home
/// (`bots/<id>`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changed {
    pub home: Changes,
    #[serde(default)]
    pub folders: BTreeMap<String, Changes>,
}

impl Changed {
    /// Counts a file written (`bytes` of data) or removed at `p`.
    pub(crate) fn count(&mut self, p: &str, written: bool, bytes: u64) {
        let add = |c: &mut Changes| {
            if written {
                c.written += 1;
                c.bytes += bytes;
            } else {
                c.removed += 1;
            }
        };
        add(&mut self.home);
        if let Some(f) = folder_of(p) {
            add(self.folders.entry(f.to_string()).or_default());
        }
    }

    /// The changes in `folder` ("": the whole home).
    pub fn in_folder(&self, folder: &str) -> Changes {
        if folder.is_empty() {
            self.home
        } else {
            self.folders.get(folder).copied().unwrap_or_default()
        }
    }
}

/// A bot's folder a path of a Team home is in (`bots/<id>`), if any.
pub(crate) fn folder_of(p: &str) -> Option<&str> {
    let rest = p.strip_prefix("bots/")?;
    let end = rest.find('/')?;
    Some(&p[..5 + end])
}

/// What a version is, kept beside it as `v<N>.meta`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    pub version: u64,
    /// When it was made (ms since the epoch).
    pub at: i64,
    pub why: Why,
    /// Regular files it holds, and their bytes.
    pub files: u64,
    pub bytes: u64,
    pub changed: Changed,
}

/// How long versions are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
pub struct Retention {
    /// Every version younger than this is kept.
    pub all_hours: u32,
    /// Then the newest version of each day, for this many days.
    pub daily_days: u32,
}

const DAY_MS: i64 = 24 * 3600 * 1000;

/// The versions the retention keeps, of `all` (version, made at ms), at `now`: `current`, every one
/// younger than `all_hours`, and the newest of each day (UTC) younger than `daily_days`.
pub(crate) fn kept(all: &[(u64, i64)], current: u64, now: i64, r: Retention) -> BTreeSet<u64> {
    let recent = now - r.all_hours as i64 * 3600 * 1000;
    let oldest = now - r.daily_days as i64 * DAY_MS;
    let mut newest_of_day: HashMap<i64, (i64, u64)> = HashMap::new();
    let mut keep = BTreeSet::from([current]);
    for &(v, at) in all {
        if at >= recent {
            keep.insert(v);
        } else if at >= oldest {
            let day = at.div_euclid(DAY_MS);
            let e = newest_of_day.entry(day).or_insert((at, v));
            if (at, v) > *e {
                *e = (at, v);
            }
        }
    }
    keep.extend(newest_of_day.values().map(|&(_, v)| v));
    keep
}

pub(crate) fn meta_path(store: &Path, version: u64) -> PathBuf {
    store.join(format!("v{version}.meta"))
}

pub(crate) fn write_meta(store: &Path, meta: &Meta) -> Result<()> {
    let p = meta_path(store, meta.version);
    fs::write(&p, serde_json::to_vec(meta).expect("a version's meta serialises")).map_err(|e| err("writing", &p, e))
}

/// The versions in the store (finished ones: `v<N>` folders), oldest first.
pub(crate) fn versions(store: &Path) -> Result<Vec<u64>> {
    let mut out = vec![];
    let entries = match fs::read_dir(store) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(err("reading", store, e)),
    };
    for e in entries.flatten() {
        let name = e.file_name();
        if let Some(n) = name.to_str().and_then(|n| n.strip_prefix('v')).and_then(|n| n.parse::<u64>().ok()) {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.push(n);
            }
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// What each version is, oldest first. A version without its meta (made before history was kept,
/// or whose meta was lost) is `Earlier`, dated by its folder.
pub(crate) fn list(store: &Path) -> Result<Vec<Meta>> {
    let mut out = vec![];
    for v in versions(store)? {
        let meta = fs::read(meta_path(store, v)).ok().and_then(|b| serde_json::from_slice::<Meta>(&b).ok()).filter(|m| m.version == v);
        out.push(meta.unwrap_or_else(|| {
            let at = fs::symlink_metadata(store.join(format!("v{v}"))).map(|m| m.mtime() * 1000).unwrap_or(0);
            Meta { version: v, at, why: Why::Earlier, files: 0, bytes: 0, changed: Changed::default() }
        }));
    }
    Ok(out)
}

/// Bytes the store takes on disk: every folder and file counted once, however many versions
/// share it.
pub(crate) fn disk_use(store: &Path) -> Result<u64> {
    let mut seen = HashSet::new();
    let mut total = 0u64;
    for v in versions(store)? {
        let root = store.join(format!("v{v}"));
        home_store::walk(&root, "", &mut |_, m| {
            if seen.insert((m.dev(), m.ino())) {
                total += m.blocks() * 512;
            }
            Ok(())
        })?;
    }
    Ok(total)
}

/// Recreates `src` (a real folder) inside `dst` (an existing folder): folders made (owner-only until
/// `modes` are applied), files hard-linked, symbolic links copied; FIFOs and the like do not occur
/// in a version. `files` gets each regular file's path (relative to `dst_rel`) and metadata.
fn link_tree(src: &Path, dst: &Path, dst_rel: &str, modes: &mut Vec<(PathBuf, u32, i64)>, files: &mut dyn FnMut(String, &fs::Metadata)) -> Result<()> {
    home_store::walk(src, "", &mut |rel, m| {
        let to = dst.join(rel);
        let full = if dst_rel.is_empty() { rel.to_string() } else { format!("{dst_rel}/{rel}") };
        link_one(&src.join(rel), &to, m, modes)?;
        if m.is_file() {
            files(full, m);
        }
        Ok(())
    })
}

fn link_one(from: &Path, to: &Path, m: &fs::Metadata, modes: &mut Vec<(PathBuf, u32, i64)>) -> Result<()> {
    if m.is_dir() {
        fs::DirBuilder::new().mode(0o700).create(to).map_err(|e| err("creating", to, e))?;
        modes.push((to.to_path_buf(), m.mode() & 0o1777, home_store::mtime_ns(m)));
    } else if m.is_file() {
        fs::hard_link(from, to).map_err(|e| err("linking", to, e))?;
    } else if m.file_type().is_symlink() {
        let target = fs::read_link(from).map_err(|e| err("reading", from, e))?;
        std::os::unix::fs::symlink(&target, to).map_err(|e| err("writing", to, e))?;
        home_store::link_mtime(to, home_store::mtime_ns(m)).map_err(|e| err("writing", to, e))?;
    }
    Ok(())
}

/// What a path of a derived version becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Take {
    /// What it is in the version at this folder (it must be there).
    From(PathBuf),
    /// Nothing.
    Remove,
}

/// Makes `partial` (it must not exist) the version `prev` (the current one: its folder and index
/// file)
/// with each edit's path ("": everything) taken from another version or removed; everything else
/// stays as in `prev`. All by hard links, so the versions share their files. Edits must not nest.
/// `changed` counts what changed under the edited paths, as a checkpoint counts.
pub(crate) fn derive(partial: &Path, prev: Option<(&Path, &Path)>, edits: &[(String, Take)], changed: &mut Changed) -> Result<()> {
    let edited = |p: &str| edits.iter().any(|(t, _)| t.is_empty() || home_store::within(p, t));
    fs::DirBuilder::new().mode(0o700).create(partial).map_err(|e| err("creating", partial, e))?;
    let mut modes = vec![];
    if let Some((root, _)) = prev {
        // What stays: everything of the current version but the edited paths.
        home_store::walk(root, "", &mut |rel, m| if edited(rel) { Ok(()) } else { link_one(&root.join(rel), &partial.join(rel), m, &mut modes) })?;
    }
    let mut now: HashMap<String, (u64, i64, u32)> = HashMap::new();
    let mut note = |p: String, m: &fs::Metadata| {
        now.insert(p, (m.len(), home_store::mtime_ns(m), m.mode() & 0o1777));
    };
    for (target, take) in edits {
        let Take::From(from) = take else { continue };
        // The folders on the way, as `from` has them where the current version has none.
        let parts: Vec<&str> = target.split('/').filter(|c| !c.is_empty()).collect();
        for i in 1..parts.len() {
            let rel = parts[..i].join("/");
            let to = partial.join(&rel);
            if fs::symlink_metadata(&to).is_ok_and(|m| m.is_dir()) {
                continue;
            }
            home_store::remove_tree(&to)?;
            let m = fs::symlink_metadata(from.join(&rel)).map_err(|e| err("reading", &from.join(&rel), e))?;
            link_one(&from.join(&rel), &to, &m, &mut modes)?;
        }
        let src = from.join(target);
        let m = fs::symlink_metadata(&src).map_err(|e| err("reading", &src, e))?;
        if target.is_empty() {
            link_tree(&src, partial, "", &mut modes, &mut note)?;
        } else {
            let to = partial.join(target);
            link_one(&src, &to, &m, &mut modes)?;
            if m.is_dir() {
                link_tree(&src, &to, target, &mut modes, &mut note)?;
            } else if m.is_file() {
                note(target.to_string(), &m);
            }
        }
    }
    // What changed under the edited paths.
    let mut before: HashMap<String, (u64, i64, u32)> = HashMap::new();
    if let Some((_, index)) = prev {
        for e in IndexReader::open(index)? {
            if let IndexEntry::File((p, size, mtime, mode)) = e? {
                if edited(&p) {
                    before.insert(p, (size, mtime, mode));
                }
            }
        }
    }
    for (p, was) in &before {
        match now.get(p) {
            None => changed.count(p, false, 0),
            Some(is) if is != was => changed.count(p, true, is.0),
            Some(_) => {}
        }
    }
    for (p, is) in &now {
        if !before.contains_key(p.as_str()) {
            changed.count(p, true, is.0);
        }
    }
    // Folder modes and times last, deepest first.
    modes.sort_by_key(|(p, ..)| std::cmp::Reverse(p.components().count()));
    for (p, mode, mtime) in modes {
        let f = fs::File::open(&p).map_err(|e| err("finishing", &p, e))?;
        f.set_modified(home_store::time_of(mtime)).map_err(|e| err("finishing", &p, e))?;
        f.set_permissions(fs::Permissions::from_mode(mode)).map_err(|e| err("finishing", &p, e))?;
    }
    Ok(())
}

/// A derived version's edits (see [`derive`]), and what an undo left because it changed since.
#[derive(Debug, Default)]
pub(crate) struct Edits {
    pub edits: Vec<(String, Take)>,
    pub kept: Vec<String>,
}

/// One entry of a version, as undo compares them.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Dir,
    /// Inode, size, mtime, mode.
    File(u64, u64, i64, u32),
    Link(PathBuf),
}

impl Entry {
    /// The same content: a file by its inode (versions share unchanged files) or its size, time
    /// and mode; a link by its target; a folder is a folder.
    fn same(a: Option<&Entry>, b: Option<&Entry>) -> bool {
        match (a, b) {
            (Some(Entry::File(i, s, t, m)), Some(Entry::File(j, z, u, n))) => i == j || (s, t, m) == (z, u, n),
            (a, b) => a == b,
        }
    }
}

fn entries(root: &Path, folder: &str) -> Result<BTreeMap<String, Entry>> {
    let mut out = BTreeMap::new();
    if home_store::find_dir(root, folder)? != home_store::Found::Folder {
        return Ok(out);
    }
    home_store::walk(root, folder, &mut |rel, m| {
        let p = if folder.is_empty() { rel.to_string() } else { format!("{folder}/{rel}") };
        let e = if m.is_dir() {
            Entry::Dir
        } else if m.is_file() {
            Entry::File(m.ino(), m.len(), home_store::mtime_ns(m), m.mode() & 0o1777)
        } else if m.file_type().is_symlink() {
            Entry::Link(fs::read_link(root.join(&p)).unwrap_or_default())
        } else {
            return Ok(());
        };
        out.insert(p, e);
        Ok(())
    })?;
    Ok(out)
}

/// The edits that undo, in `folder` of the version at `present`, what changed from the version at
/// `before` to the one at `after` (a run's): each path the run created, changed or removed goes
/// back to `before`, unless it changed again since (then it is kept, and named).
pub(crate) fn undo_edits(before: &Path, after: &Path, present: &Path, folder: &str) -> Result<Edits> {
    let (b, a, n) = (entries(before, folder)?, entries(after, folder)?, entries(present, folder)?);
    let under = |p: &str, d: &str| p.strip_prefix(d).is_some_and(|r| r.starts_with('/'));
    // A folder's whole subtree is the same in two versions.
    let same_tree = |x: &BTreeMap<String, Entry>, y: &BTreeMap<String, Entry>, d: &str| {
        let sub = |m: &BTreeMap<String, Entry>| {
            m.range(d.to_string()..).filter(|(p, _)| *p == d || under(p, d)).map(|(p, e)| (p.clone(), e.clone())).collect::<Vec<_>>()
        };
        let (sx, sy) = (sub(x), sub(y));
        sx.len() == sy.len() && sx.iter().zip(&sy).all(|((p, e), (q, f))| p == q && Entry::same(Some(e), Some(f)))
    };
    let mut edits: Vec<(String, Take)> = vec![];
    let mut kept = vec![];
    let paths: BTreeSet<&String> = b.keys().chain(a.keys()).collect();
    for p in paths {
        if edits.iter().any(|(t, _)| under(p, t)) {
            continue;
        }
        let (was, became, is) = (b.get(p), a.get(p), n.get(p));
        if Entry::same(was, became) {
            continue; // the run left it (a folder's insides are looked at one by one)
        }
        let dir_after = matches!(became, Some(Entry::Dir));
        // What is there now must still be what the run left, all of it for a folder.
        let untouched = if dir_after { matches!(is, Some(Entry::Dir)) && same_tree(&n, &a, p) } else { Entry::same(is, became) };
        if !untouched {
            if !dir_after || was.is_none() && !matches!(is, Some(Entry::Dir)) {
                kept.push(p.clone());
            }
            continue; // a folder with something new inside: its entries are looked at one by one
        }
        edits.push((p.clone(), if was.is_some() { Take::From(before.to_path_buf()) } else { Take::Remove }));
    }
    Ok(Edits { edits, kept })
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3600 * 1000;

    /// Every version of the last 48 hours, then the newest of each day for 30 days, and always the
    /// current one.
    #[test]
    fn the_retention_keeps_recent_versions_then_one_a_day() {
        let now = 100 * DAY_MS + 12 * H;
        let r = Retention { all_hours: 48, daily_days: 30 };
        // One version an hour for 40 days.
        let all: Vec<(u64, i64)> = (0..40 * 24).map(|i| (i as u64 + 1, now - (40 * 24 - 1 - i) * H)).collect();
        let keep = kept(&all, 1, now, r);
        let recent = all.iter().filter(|(_, at)| *at >= now - 48 * H).count();
        assert_eq!(recent, 49);
        // 49 recent, plus one a day for the days between 48 h and 30 days ago (28 or 29 of them,
        // the day 48 h ago cut in two), plus the current one (the oldest here).
        assert!(keep.len() == 49 + 28 + 1 || keep.len() == 49 + 29 + 1, "{}", keep.len());
        assert!(keep.contains(&1), "the current version stays whatever its age");
        assert!(!keep.contains(&2));
        // The newest of a day is the one kept.
        let day = (now - 10 * DAY_MS).div_euclid(DAY_MS);
        let of_day: Vec<u64> = all.iter().filter(|(_, at)| at.div_euclid(DAY_MS) == day).map(|(v, _)| *v).collect();
        assert_eq!(of_day.iter().filter(|v| keep.contains(v)).collect::<Vec<_>>(), [of_day.iter().max().unwrap()]);
        // Nothing older than 30 days.
        assert!(all.iter().filter(|(v, at)| *at < now - 30 * DAY_MS && *v != 1).all(|(v, _)| !keep.contains(v)));
    }

    fn tree(root: &Path) -> Vec<String> {
        let mut out = vec![];
        home_store::walk(root, "", &mut |rel, m| {
            let what = if m.is_dir() {
                format!("dir {:o}", m.mode() & 0o777)
            } else if m.file_type().is_symlink() {
                format!("-> {}", fs::read_link(root.join(rel)).unwrap().display())
            } else {
                fs::read_to_string(root.join(rel)).unwrap()
            };
            out.push(format!("{rel} {what}"));
            Ok(())
        })
        .unwrap();
        out
    }

    /// A restore in the store: the new version is the current one with the target as it was in
    /// the old one, every file shared with one of them; neither of them changes.
    #[test]
    fn a_derived_version_takes_the_target_from_the_old_version_and_the_rest_from_the_current() {
        let t = tempfile::tempdir().unwrap();
        let (v1, v2) = (t.path().join("v1"), t.path().join("v2"));
        let put = |root: &Path, p: &str, body: &str| {
            fs::create_dir_all(root.join(p).parent().unwrap()).unwrap();
            fs::write(root.join(p), body).unwrap();
        };
        put(&v1, "bots/a/notes/x.md", "first");
        put(&v1, "bots/a/notes/old.md", "old");
        put(&v1, "bots/b/y.md", "b's");
        std::os::unix::fs::symlink("notes/x.md", v1.join("bots/a/link")).unwrap();
        fs::set_permissions(v1.join("bots/a/notes"), fs::Permissions::from_mode(0o555)).unwrap();
        put(&v2, "bots/a/notes/x.md", "second");
        put(&v2, "bots/a/new.md", "new");
        put(&v2, "bots/b/y.md", "b's, changed");
        let (before1, before2) = (tree(&v1), tree(&v2));
        let index = t.path().join("v2.index");
        home_store::write_walk_index(&v2, &index).unwrap();

        let v3 = t.path().join("v3.partial");
        let mut changed = Changed::default();
        derive(&v3, Some((&v2, &index)), &[("bots/a".into(), Take::From(v1.clone()))], &mut changed).unwrap();
        assert_eq!(
            tree(&v3),
            [
                "bots dir 755",
                "bots/a dir 755",
                "bots/a/link -> notes/x.md",
                "bots/a/notes dir 555",
                "bots/a/notes/old.md old",
                "bots/a/notes/x.md first",
                "bots/b dir 755",
                "bots/b/y.md b's, changed",
            ]
        );
        let ino = |p: &Path| fs::symlink_metadata(p).unwrap().ino();
        assert_eq!(ino(&v3.join("bots/a/notes/x.md")), ino(&v1.join("bots/a/notes/x.md")));
        assert_eq!(ino(&v3.join("bots/b/y.md")), ino(&v2.join("bots/b/y.md")));
        assert_eq!(changed.in_folder("bots/a"), Changes { written: 2, removed: 1, bytes: 5 + 3 });
        assert_eq!(changed.in_folder("bots/b"), Changes::default());
        assert_eq!((tree(&v1), tree(&v2)), (before1.clone(), before2), "the versions it came from are untouched");

        // One file, and everything.
        let v4 = t.path().join("v4.partial");
        let mut changed = Changed::default();
        derive(&v4, Some((&v2, &index)), &[("bots/a/notes/x.md".into(), Take::From(v1.clone()))], &mut changed).unwrap();
        assert_eq!(fs::read_to_string(v4.join("bots/a/notes/x.md")).unwrap(), "first");
        assert_eq!(fs::read_to_string(v4.join("bots/a/new.md")).unwrap(), "new");
        assert!(!v4.join("bots/a/notes/old.md").exists());
        assert_eq!(changed.home, Changes { written: 1, removed: 0, bytes: 5 });
        let v5 = t.path().join("v5.partial");
        derive(&v5, Some((&v2, &index)), &[(String::new(), Take::From(v1.clone()))], &mut Changed::default()).unwrap();
        assert_eq!(tree(&v5), before1);
        for v in [&v1, &v3, &v4, &v5] {
            home_store::remove_tree(v).unwrap();
        }
    }

    /// Undo puts back what the run changed, as it was, and leaves what changed again since.
    #[test]
    fn undo_takes_back_only_what_the_run_changed_and_nothing_changed_since() {
        let t = tempfile::tempdir().unwrap();
        let (before, after, present) = (t.path().join("v1"), t.path().join("v2"), t.path().join("v3"));
        let put = |root: &Path, p: &str, body: &str| {
            fs::create_dir_all(root.join(p).parent().unwrap()).unwrap();
            fs::write(root.join(p), body).unwrap();
        };
        let link = |from: &Path, to: &Path, p: &str| {
            fs::create_dir_all(to.join(p).parent().unwrap()).unwrap();
            fs::hard_link(from.join(p), to.join(p)).unwrap();
        };
        for p in ["f/a", "f/b", "f/d/x", "g/other"] {
            put(&before, p, "1");
        }
        // The run: changes a, removes b and the folder d, creates c and e/y.
        put(&after, "f/a", "2");
        put(&after, "f/c", "new");
        put(&after, "f/e/y", "new");
        link(&before, &after, "g/other");
        // Since: the person edits c, adds e/z and late; a and e/y are as the run left them.
        for p in ["f/a", "f/e/y", "g/other"] {
            link(&after, &present, p);
        }
        put(&present, "f/c", "edited");
        put(&present, "f/e/z", "mine");
        put(&present, "f/late", "mine");
        let Edits { edits, kept } = undo_edits(&before, &after, &present, "f").unwrap();
        let from = || Take::From(before.clone());
        assert_eq!(edits, [("f/a".to_string(), from()), ("f/b".to_string(), from()), ("f/d".to_string(), from()), ("f/e/y".to_string(), Take::Remove)]);
        assert_eq!(kept, ["f/c"]);
        // Applied: the folder as before the run, but for what changed since.
        let index = t.path().join("present.index");
        home_store::write_walk_index(&present, &index).unwrap();
        let v4 = t.path().join("v4");
        derive(&v4, Some((&present, &index)), &edits, &mut Changed::default()).unwrap();
        assert_eq!(
            tree(&v4),
            ["f dir 755", "f/a 1", "f/b 1", "f/c edited", "f/d dir 755", "f/d/x 1", "f/e dir 755", "f/e/z mine", "f/late mine", "g dir 755", "g/other 1"]
        );
    }

    #[test]
    fn a_paths_bot_folder() {
        assert_eq!(folder_of("bots/b1/notes/x.md"), Some("bots/b1"));
        assert_eq!(folder_of("bots/b1"), None);
        assert_eq!(folder_of("shared/x"), None);
        assert_eq!(folder_of("notes.md"), None);
    }
}
