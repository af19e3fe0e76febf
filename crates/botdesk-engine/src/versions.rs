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

use crate::home_store::{self, err, Index};
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
            Why::Earlier => "earlier checkpoint".into(),
        }
    }

    pub fn run_id(&self) -> Option<&str> {
        match self {
            Why::Run { run_id } | Why::BeforeRun { run_id } => Some(run_id),
            _ => None,
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

/// Makes `partial` (it must not exist) the version `prev` (the current one: its folder and index)
/// with `target` ("": everything) as it is in the version at `from`: the rest shared with `prev`,
/// the restored part with `from`, all by hard links. `target` must exist in `from`. Returns what
/// changed under `target`, counted as a checkpoint counts.
pub(crate) fn derive(partial: &Path, prev: Option<(&Path, &Index)>, from: &Path, target: &str, changed: &mut Changed) -> Result<()> {
    let under = |p: &str| target.is_empty() || p == target || p.strip_prefix(target).is_some_and(|r| r.starts_with('/'));
    fs::DirBuilder::new().mode(0o700).create(partial).map_err(|e| err("creating", partial, e))?;
    let mut modes = vec![];
    if let Some((root, _)) = prev.filter(|_| !target.is_empty()) {
        // What stays: everything of the current version but the target.
        home_store::walk(root, "", &mut |rel, m| if under(rel) { Ok(()) } else { link_one(&root.join(rel), &partial.join(rel), m, &mut modes) })?;
    }
    // The target's folders on the way, as `from` has them.
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
    let mut now: HashMap<String, (u64, i64, u32)> = HashMap::new();
    let mut note = |p: String, m: &fs::Metadata| {
        now.insert(p, (m.len(), home_store::mtime_ns(m), m.mode() & 0o1777));
    };
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
    // What changed under the target.
    let before: HashMap<&str, (u64, i64, u32)> =
        prev.map(|(_, i)| i.files.iter().filter(|f| under(&f.0)).map(|f| (f.0.as_str(), (f.1, f.2, f.3))).collect()).unwrap_or_default();
    for (p, was) in &before {
        if !now.contains_key(*p) {
            changed.count(p, false, 0);
        } else if now[*p] != *was {
            changed.count(p, true, now[*p].0);
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
        let index = home_store::walk_index(&v2).unwrap();

        let v3 = t.path().join("v3.partial");
        let mut changed = Changed::default();
        derive(&v3, Some((&v2, &index)), &v1, "bots/a", &mut changed).unwrap();
        assert_eq!(
            tree(&v3),
            [
                "bots dir 755",
                "bots/a dir 755",
                "bots/b dir 755",
                "bots/a/link -> notes/x.md",
                "bots/a/notes dir 555",
                "bots/a/notes/old.md old",
                "bots/a/notes/x.md first",
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
        derive(&v4, Some((&v2, &index)), &v1, "bots/a/notes/x.md", &mut changed).unwrap();
        assert_eq!(fs::read_to_string(v4.join("bots/a/notes/x.md")).unwrap(), "first");
        assert_eq!(fs::read_to_string(v4.join("bots/a/new.md")).unwrap(), "new");
        assert!(!v4.join("bots/a/notes/old.md").exists());
        assert_eq!(changed.home, Changes { written: 1, removed: 0, bytes: 5 });
        let v5 = t.path().join("v5.partial");
        derive(&v5, Some((&v2, &index)), &v1, "", &mut Changed::default()).unwrap();
        assert_eq!(tree(&v5), before1);
        for v in [&v1, &v3, &v4, &v5] {
            home_store::remove_tree(v).unwrap();
        }
    }

    #[test]
    fn a_paths_bot_folder() {
        assert_eq!(folder_of("bots/b1/notes/x.md"), Some("bots/b1"));
        assert_eq!(folder_of("bots/b1"), None);
        assert_eq!(folder_of("shared/x"), None);
        assert_eq!(folder_of("notes.md"), None);
    }
}
