//! The home stream: how a computer's home leaves it (checkpoints) and comes back (restores,
//! switches). The host never reads or writes a tree a bot can write: the computer walks its own
//! home and streams records out; the host writes them into folders only it can write, and sends
//! records back the same way. Everything that arrives from a computer is judged here, as hostile:
//! header lines are bounded, paths are checked, sizes are only ever stream lengths (nothing is
//! allocated by a size a computer claims).
//!
//! # Records
//! Each record is one header line (a JSON object, at most [`MAX_HEADER`] bytes with its `\n`),
//! followed, for a file, by its data bytes:
//!
//! ```text
//! {"t":"dir","p":PATH,"mode":M,"mtime":NS}
//! {"t":"file","p":PATH,"mode":M,"mtime":NS,"size":S,"data":[[OFF,LEN],...]}   then Σ LEN bytes
//! {"t":"extents","p":PATH,"data":[[OFF,LEN],...]}   then Σ LEN bytes: more of the file just sent
//! {"t":"same","p":PATH}                 (out of a computer only) unchanged since the previous version
//! {"t":"link","p":PATH,"target":T,"mtime":NS}
//! {"t":"hardlink","p":PATH,"to":PATH2,"mode":M}  the same file as PATH2, a regular file earlier in the stream
//! {"t":"skipped","p":PATH,"why":WHY}    (out of a computer only) a FIFO, socket, device, or unreadable
//! {"t":"end","entries":N}               N records before it
//! ```
//!
//! - `PATH` is relative to the home (or to the subtree being sent), `/`-separated, with no empty,
//!   `.` or `..` component and no NUL ([`check_path`]). Records come in walk order: a folder, then
//!   everything inside it, then its next sibling; the entries of a folder by name (UTF-8 bytes).
//!   A host receiving a save holds only the chain of folders it is in, so it refuses a path that
//!   is not after the one before it (a `skipped` record excepted: a stand-in name may sort
//!   anywhere).
//! - `M` is the permission bits (`0o1777` at most: setuid and setgid never travel); `NS` is the
//!   modification time in nanoseconds since the epoch.
//! - `data` lists the file's data extents in order, not overlapping, inside `S`; the rest of the
//!   file is holes, so a sparse file stays sparse. A whole file is `[[0,S]]`; an empty one `[]`.
//!   A file with more extents than one header holds says `"more":true`, and `extents` records
//!   carry the rest (the last one without `more`), each after the one before: holes are never
//!   sent as zeros, however many there are. An `extents` record is not an entry of its own.
//! - A stream is complete only with its `end` record; anything cut short changes nothing.
//!
//! # Saving (`botdesk-helper save`)
//! The host writes an options line `{"skip_under":".browser-profiles","skip_names":[...]}` and
//! then the previous version's index, a line per entry in walk order (its first line
//! `botdesk-index 2`, then `d "PATH"` for a folder and `f S NS M "PATH"` for a regular file, the
//! path a JSON string), and closes stdin. The computer reads the index as its walk goes (both are
//! in walk order, so neither side holds it) and answers with the records of its whole home; a
//! regular file whose size, mtime and mode equal its index line comes as `same`.
//!
//! # Loading (`botdesk-helper load`)
//! The host writes an options line, then records (no `same`, no `skipped`), then `end`:
//! - `{"mode":"restore"}`: the home becomes exactly the stream.
//! - `{"mode":"merge","into":PREFIX}`: merged under PREFIX (created as needed): what is missing
//!   comes in, a file replaces an older one, anything newer or of another kind stays and is named
//!   in `kept_newer`.
//! - `{"mode":"replace","into":PATH}`: PATH becomes exactly the stream (a browser profile).
//! - `{"mode":"put","into":PREFIX,"names":[NAME,...]}`: each NAME in PREFIX (created as needed)
//!   becomes what the stream holds under that name at its top, whatever it was, or nothing when
//!   the stream holds none; the rest of PREFIX stays (a restore, an undo). A NAME is one plain
//!   path component.
//!
//! The computer stages everything and changes nothing unless the stream ended with `end`; it
//! never follows a symlink while placing (a symlink in PREFIX or PATH is refused). It answers with
//! one JSON line [`LoadSummary`].

use serde::{Deserialize, Serialize};

use crate::error::ComputerError;

/// Longest header line, `\n` included (two paths of 4 KiB and the JSON around them).
pub const MAX_HEADER: usize = 16 * 1024;
/// Longest path, in bytes.
pub const MAX_PATH: usize = 4096;
/// Most data extents one file may list; a file with more is sent whole.
pub const MAX_EXTENTS: usize = 4096;
/// Largest file a stream may declare (a sparse file may be this large on disk-cheap holes).
pub const MAX_FILE: u64 = 1 << 40;

/// One record header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "lowercase")]
pub enum Record {
    Dir {
        p: String,
        mode: u32,
        mtime: i64,
    },
    File {
        p: String,
        mode: u32,
        mtime: i64,
        size: u64,
        data: Vec<(u64, u64)>,
        /// `extents` records follow with the rest of the file's data.
        #[serde(default, skip_serializing_if = "is_false")]
        more: bool,
    },
    /// More data extents of the file just sent (whose record said `more`).
    Extents {
        p: String,
        data: Vec<(u64, u64)>,
        #[serde(default, skip_serializing_if = "is_false")]
        more: bool,
    },
    Same {
        p: String,
    },
    Link {
        p: String,
        target: String,
        mtime: i64,
    },
    /// Another name of a regular file sent earlier in the same stream (a hard link).
    Hardlink {
        p: String,
        to: String,
        /// The file's mode (the same inode's as `to`'s: said again so the host need not keep it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<u32>,
    },
    Skipped {
        p: String,
        why: String,
    },
    End {
        entries: u64,
    },
}

impl Record {
    pub fn path(&self) -> Option<&str> {
        match self {
            Record::Dir { p, .. }
            | Record::File { p, .. }
            | Record::Extents { p, .. }
            | Record::Same { p }
            | Record::Link { p, .. }
            | Record::Hardlink { p, .. }
            | Record::Skipped { p, .. } => Some(p),
            Record::End { .. } => None,
        }
    }

    /// The header line, `\n` included.
    pub fn line(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec(self).expect("a record serialises");
        v.push(b'\n');
        v
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Where one file's data stands while its records come: each extent after the one before and
/// inside its size, an `extents` record only for the file that asked for more.
#[derive(Debug)]
pub struct FileData {
    pub p: String,
    pub size: u64,
    end: u64,
}

impl FileData {
    /// After a `file` record (checked by [`parse_header`]).
    pub fn new(p: &str, size: u64, data: &[(u64, u64)]) -> FileData {
        FileData { p: p.to_string(), size, end: data.last().map_or(0, |&(o, l)| o + l) }
    }

    /// Checks an `extents` record's data against what came before it.
    pub fn more(&mut self, p: &str, data: &[(u64, u64)]) -> Result<(), ComputerError> {
        if p != self.p {
            return Err(bad(format!("extents of {p} came while {} was sent", self.p)));
        }
        for &(off, len) in data {
            let stop = off.checked_add(len).ok_or_else(|| bad(format!("{p}: extent overflows")))?;
            if off < self.end || stop > self.size {
                return Err(bad(format!("{p}: extents out of order or past its size")));
            }
            self.end = stop;
        }
        Ok(())
    }
}

/// Splits a file's extents into the `file` record and its `extents` records, at most `per` each.
pub fn file_records(p: &str, mode: u32, mtime: i64, size: u64, data: &[(u64, u64)], per: usize) -> Vec<Record> {
    let mut chunks = data.chunks(per.max(1));
    let first = chunks.next().unwrap_or(&[]).to_vec();
    let rest: Vec<_> = chunks.collect();
    let mut out = vec![Record::File { p: p.into(), mode, mtime, size, data: first, more: !rest.is_empty() }];
    for (i, c) in rest.iter().enumerate() {
        out.push(Record::Extents { p: p.into(), data: c.to_vec(), more: i + 1 < rest.len() });
    }
    out
}

/// One regular file of the previous version's manifest, sent before a save: path, size, mtime
/// (ns), mode.
pub type ManifestEntry = (String, u64, i64, u32);

/// The options line of a save.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SaveOptions {
    /// A top-level folder whose caches and lock files are not saved.
    pub skip_under: String,
    /// Names (of folders or files) not saved under `skip_under`.
    pub skip_names: Vec<String>,
}

/// How a load is applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum LoadMode {
    Restore,
    Merge { into: String },
    Replace { into: String },
    Put { into: String, names: Vec<String> },
}

/// The computer's answer to a load.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadSummary {
    pub files: u64,
    pub dirs: u64,
    pub links: u64,
    pub bytes: u64,
    /// Merge only: paths (relative to PREFIX) that stayed because the computer's copy was newer
    /// or of another kind.
    #[serde(default)]
    pub kept_newer: Vec<String>,
}

fn bad(msg: impl Into<String>) -> ComputerError {
    ComputerError::Provider(format!("bad home stream from the computer: {}", msg.into()))
}

/// Checks a record path: relative, no empty, `.` or `..` component, no NUL, at most [`MAX_PATH`].
/// Returns its components.
pub fn check_path(p: &str) -> Result<Vec<&str>, ComputerError> {
    if p.is_empty() || p.len() > MAX_PATH || p.contains('\0') || p.starts_with('/') {
        return Err(bad(format!("path {p:?} is not a relative path")));
    }
    let parts: Vec<&str> = p.split('/').collect();
    if parts.iter().any(|c| c.is_empty() || *c == "." || *c == ".." || c.len() > 255) {
        return Err(bad(format!("path {p:?} is not a plain relative path")));
    }
    Ok(parts)
}

/// Parses and checks one header line (without its `\n`). Paths, modes, sizes and extents are
/// checked here, so a caller only sees records it can act on.
pub fn parse_header(line: &[u8]) -> Result<Record, ComputerError> {
    let r: Record = serde_json::from_slice(line).map_err(|e| bad(format!("unreadable record ({e})")))?;
    if let Some(p) = r.path() {
        check_path(p)?;
    }
    match &r {
        Record::Dir { mode, .. } | Record::File { mode, .. } if *mode & !0o1777 != 0 => Err(bad(format!("mode {mode:o} of {}", r.path().unwrap_or("")))),
        Record::File { p, size, data, .. } => {
            if *size > MAX_FILE {
                return Err(bad(format!("{p} claims {size} bytes")));
            }
            if data.len() > MAX_EXTENTS {
                return Err(bad(format!("{p} lists {} extents", data.len())));
            }
            let mut end = 0u64;
            for &(off, len) in data {
                let stop = off.checked_add(len).ok_or_else(|| bad(format!("{p}: extent overflows")))?;
                if off < end || stop > *size {
                    return Err(bad(format!("{p}: extents out of order or past its size")));
                }
                end = stop;
            }
            Ok(r)
        }
        Record::Hardlink { to, .. } => {
            check_path(to)?;
            Ok(r)
        }
        Record::Extents { p, data, .. } => {
            if data.len() > MAX_EXTENTS {
                return Err(bad(format!("{p} lists {} extents", data.len())));
            }
            Ok(r)
        }
        Record::Link { p, target, .. } if target.is_empty() || target.len() > MAX_PATH || target.contains('\0') => Err(bad(format!("{p}: bad link target"))),
        Record::Skipped { why, .. } if why.len() > 256 => Err(bad("a skip reason is too long")),
        _ => Ok(r),
    }
}

/// Reads one header line from `r`, at most [`MAX_HEADER`] bytes; None at a clean end of stream.
pub fn read_header<R: std::io::BufRead>(r: &mut R) -> std::io::Result<Option<Record>> {
    let mut line = Vec::new();
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return if line.is_empty() { Ok(None) } else { Err(invalid("the stream ended inside a header")) };
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        if line.len() + take > MAX_HEADER {
            return Err(invalid(&format!("a header line is longer than {MAX_HEADER} bytes")));
        }
        line.extend_from_slice(&buf[..take]);
        r.consume(take);
        if done {
            line.pop();
            return parse_header(&line).map(Some).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()));
        }
    }
}

fn invalid(msg: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("bad home stream from the computer: {msg}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

        /// Any bytes a computer sends as a home stream: records that pass every check, or one
        /// error; never a panic, and never more than one header line read at a time.
        #[test]
        fn any_stream_yields_checked_records_or_an_error(lines in proptest::collection::vec(prop_oneof![
            Just(r#"{"t":"dir","p":"a","mode":493,"mtime":0}"#.to_string()),
            Just(r#"{"t":"file","p":"a/b","mode":420,"mtime":1,"size":3,"data":[[0,3]]}"#.to_string()),
            Just(r#"{"t":"end","entries":2}"#.to_string()),
            "[ -~]{0,80}",
            proptest::collection::vec(any::<u8>(), 0..64).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        ], 0..8)) {
            let stream = lines.join("\n");
            let mut r = std::io::BufReader::new(stream.as_bytes());
            while let Ok(Some(rec)) = read_header(&mut r) {
                if let Some(p) = rec.path() {
                    prop_assert!(check_path(p).is_ok(), "{p}");
                }
            }
        }
    }

    #[test]
    fn records_round_trip_and_bad_ones_are_refused() {
        let r = Record::File { p: "a/b.txt".into(), mode: 0o644, mtime: 5, size: 10, data: vec![(0, 4), (8, 2)], more: false };
        let line = r.line();
        assert!(!String::from_utf8_lossy(&line).contains("more"), "a file in one record says nothing of more");
        assert_eq!(parse_header(&line[..line.len() - 1]).unwrap(), r);
        for bad in [
            r#"{"t":"dir","p":"../x","mode":493,"mtime":0}"#,
            r#"{"t":"dir","p":"/etc","mode":493,"mtime":0}"#,
            r#"{"t":"dir","p":"a//b","mode":493,"mtime":0}"#,
            r#"{"t":"dir","p":"a","mode":2541,"mtime":0}"#,
            r#"{"t":"file","p":"a","mode":420,"mtime":0,"size":4,"data":[[0,5]]}"#,
            r#"{"t":"file","p":"a","mode":420,"mtime":0,"size":9,"data":[[4,2],[0,1]]}"#,
            r#"{"t":"file","p":"a","mode":420,"mtime":0,"size":18446744073709551615,"data":[]}"#,
            r#"{"t":"link","p":"a","target":"","mtime":0}"#,
            r#"{"t":"nope"}"#,
        ] {
            assert!(parse_header(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    /// A file with more extents than one record holds goes as a `file` and `extents` records,
    /// each checked against the ones before.
    #[test]
    fn many_extents_go_in_several_records_checked_in_order() {
        let data: Vec<(u64, u64)> = (0..5).map(|i| (i * 10, 2)).collect();
        let recs = file_records("f", 0o644, 0, 100, &data, 2);
        assert_eq!(recs.len(), 3);
        assert!(matches!(&recs[0], Record::File { data, more: true, .. } if data.len() == 2));
        assert!(matches!(&recs[1], Record::Extents { data, more: true, .. } if data == &[(20, 2), (30, 2)]));
        assert!(matches!(&recs[2], Record::Extents { data, more: false, .. } if data == &[(40, 2)]));
        for r in &recs {
            let line = r.line();
            assert_eq!(&parse_header(&line[..line.len() - 1]).unwrap(), r);
        }
        let mut f = FileData::new("f", 100, &data[..2]);
        f.more("f", &data[2..4]).unwrap();
        assert!(f.more("f", &[(5, 1)]).unwrap_err().to_string().contains("out of order"), "before the last extent");
        assert!(f.more("f", &[(99, 2)]).unwrap_err().to_string().contains("past its size"));
        assert!(f.more("g", &[(60, 1)]).unwrap_err().to_string().contains("while f was sent"));
        assert_eq!(file_records("e", 0o600, 0, 0, &[], 2).len(), 1, "an empty file is one record");
    }

    #[test]
    fn header_lines_are_bounded() {
        let long = vec![b'x'; MAX_HEADER + 1];
        assert!(read_header(&mut &long[..]).unwrap_err().to_string().contains("longer than"));
        let mut r = &b"{\"t\":\"end\",\"entries\":0}\n"[..];
        assert_eq!(read_header(&mut r).unwrap(), Some(Record::End { entries: 0 }));
        assert_eq!(read_header(&mut r).unwrap(), None);
        assert!(read_header(&mut &b"{\"t\":\"end\""[..]).is_err(), "a stream cut inside a header");
    }
}
