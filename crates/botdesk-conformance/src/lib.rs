//! The conformance suite: one list of scenarios that every [`ComputerProvider`] must pass.
//! `conformance_suite!(make_target())` expands to one test per scenario; the fake and the Docker
//! provider run the same list, and `home_pairing` crosses providers.

use botdesk_core::*;
use botdesk_fake::{Fault, Faulty};
use bytes::Bytes;
use std::{
    any::Any,
    sync::{atomic::AtomicU32, atomic::Ordering, Arc},
    time::{Duration, Instant},
};

/// A provider under test and how to describe a new computer for it.
pub struct Target {
    pub provider: Arc<dyn ComputerProvider>,
    pub make_spec: Box<dyn Fn(&str) -> ComputerSpec + Send + Sync>,
    /// Kept alive for the test (e.g. a temp dir and a guard removing leftover containers).
    pub guard: Option<Box<dyn Any + Send + Sync>>,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

impl Target {
    /// A new computer with a unique id, provisioned and prepared.
    pub async fn computer(&self, name: &str) -> (ComputerSpec, ComputerRef) {
        let spec = (self.make_spec)(&format!("{name}-{}", SEQ.fetch_add(1, Ordering::Relaxed)));
        let c = ComputerRef::from(&spec);
        let p = self.provider.provision(&spec, &ctx()).await.expect("provision");
        assert!(!p.provider_ref.is_empty());
        self.provider.prepare(&c, &ctx()).await.expect("prepare");
        (spec, c)
    }
    pub async fn cleanup(&self, c: &ComputerRef) {
        self.provider.destroy(c, &ctx()).await.expect("destroy");
    }
}

fn ctx() -> CallCtx {
    CallCtx::default()
}

fn p(s: &str) -> WorkspacePath {
    WorkspacePath::parse(s).unwrap()
}

async fn run(t: &Target, c: &ComputerRef, argv: &[&str]) -> (ExecExit, String, String) {
    let (exit, out, err) = exec_collect(&*t.provider, c, ExecRequest::new(argv.iter().copied()), &ctx()).await.expect("exec");
    (exit, String::from_utf8_lossy(&out).into_owned(), String::from_utf8_lossy(&err).into_owned())
}

/// The home as a save streams it out of the computer, read back into (path, description) pairs
/// sorted by path, without dot-folders at the top (`.cache`, `.fluxbox`: the desktop writes those
/// on its own schedule); they print briefly when an assertion fails.
pub async fn visible(provider: &dyn ComputerProvider, c: &ComputerRef) -> Vec<(String, String)> {
    let mut all = describe(&saved(provider, c).await.expect("save_home"));
    all.retain(|(path, _)| !path.starts_with('.'));
    all
}

/// The records of a whole save of the home.
pub async fn saved(provider: &dyn ComputerProvider, c: &ComputerRef) -> Result<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let options = Bytes::from_static(b"{\"skip_under\":\".browser-profiles\",\"skip_names\":[]}\n");
    let mut out = provider.save_home(c, Box::pin(std::io::Cursor::new(options)), &ctx()).await?;
    let mut stream = Vec::new();
    out.records.read_to_end(&mut stream).await.map_err(|e| ComputerError::Provider(e.to_string()))?;
    out.finished.await?;
    Ok(stream)
}

/// A home stream as (path, what) pairs sorted by path; a file is named by its size, its owner's
/// execute bit and the SHA-256 of its bytes (holes read as zeros).
pub fn describe(stream: &[u8]) -> Vec<(String, String)> {
    use home_stream::Record;
    use sha2::Digest;
    let file = |bytes: &[u8], mode: u32| format!("file {} bytes exec={} sha256={}", bytes.len(), mode & 0o100 != 0, hex::encode(sha2::Sha256::digest(bytes)));
    let mut r = stream;
    let mut all = vec![];
    // The file whose data is still coming (`more` extents): its path, mode and bytes.
    let mut open: Option<(String, u32, Vec<u8>)> = None;
    let fill = |bytes: &mut Vec<u8>, r: &mut &[u8], data: &[(u64, u64)]| {
        for &(off, len) in data {
            std::io::Read::read_exact(r, &mut bytes[off as usize..(off + len) as usize]).expect("the stream holds the data it announces");
        }
    };
    loop {
        let record = home_stream::read_header(&mut r).expect("a readable home stream").expect("a home stream ends with its end record");
        if let Record::Extents { data, .. } = &record {
            let (_, _, bytes) = open.as_mut().expect("extents follow their file");
            fill(bytes, &mut r, data);
            continue;
        }
        if let Some((p, mode, bytes)) = open.take() {
            all.push((p, file(&bytes, mode)));
        }
        match record {
            Record::End { .. } => break,
            Record::Dir { p, .. } => all.push((p, "dir".into())),
            Record::Link { p, target, .. } => all.push((p, format!("symlink -> {target}"))),
            Record::Hardlink { p, to, .. } => all.push((p, format!("hardlink -> {to}"))),
            Record::Skipped { p, why } => all.push((p, format!("skipped ({why})"))),
            Record::Same { p } => all.push((p, "same".into())),
            Record::File { p, mode, size, data, .. } => {
                let mut bytes = vec![0; size as usize];
                fill(&mut bytes, &mut r, &data);
                open = Some((p, mode, bytes));
            }
            Record::Extents { .. } => unreachable!(),
        }
    }
    all.sort();
    all
}

fn binary_blob() -> Bytes {
    let mut v: Vec<u8> = (0..=255u8).cycle().take(256 * 8).collect();
    v.extend_from_slice(b"\r\n\0\xff\xfe#!/bin/sh\n");
    let mut x: u32 = 0x1234_5678;
    for _ in 0..70_000 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        v.push(x as u8);
    }
    Bytes::from(v)
}

// ------------------------------------------------------------------------------------------------
// Scenarios

/// The same command on two computers reports two distinct computer ids.
pub async fn two_computers_distinct_ids(t: &Target) {
    let (a_spec, a) = t.computer("ids-a").await;
    let (b_spec, b) = t.computer("ids-b").await;
    let (ea, oa, _) = run(t, &a, &["printenv", "BOTDESK_COMPUTER_ID"]).await;
    let (eb, ob, _) = run(t, &b, &["printenv", "BOTDESK_COMPUTER_ID"]).await;
    assert_eq!((ea.code, eb.code), (0, 0));
    assert_eq!(oa.trim(), a_spec.id.as_str());
    assert_eq!(ob.trim(), b_spec.id.as_str());
    assert_ne!(oa, ob);
    t.cleanup(&a).await;
    t.cleanup(&b).await;
}

/// write → list → read round-trips exact {path, kind, size, executable}.
pub async fn files_round_trip(t: &Target) {
    let (_, c) = t.computer("files").await;
    let pv = &*t.provider;
    pv.write(&c, &p("work/notes.txt"), Bytes::from_static(b"hello\n"), false, &ctx()).await.unwrap();
    pv.write(&c, &p("work/run.sh"), Bytes::from_static(b"#!/bin/sh\necho hi\n"), true, &ctx()).await.unwrap();
    pv.create_dir(&c, &p("work/empty/deeper"), &ctx()).await.unwrap();
    pv.create_dir(&c, &p("work/empty/deeper"), &ctx()).await.unwrap(); // idempotent
    let mut listed = pv.list(&c, &p("work"), &ctx()).await.unwrap();
    listed.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(
        listed,
        vec![
            FileEntry { path: p("work/empty"), kind: FileKind::Dir, size: 0, executable: false },
            FileEntry { path: p("work/notes.txt"), kind: FileKind::File, size: 6, executable: false },
            FileEntry { path: p("work/run.sh"), kind: FileKind::File, size: 18, executable: true },
        ]
    );
    assert_eq!(&pv.read(&c, &p("work/notes.txt"), 1 << 20, &ctx()).await.unwrap()[..], b"hello\n");
    // Overwrite replaces content and mode.
    pv.write(&c, &p("work/run.sh"), Bytes::from_static(b"x"), false, &ctx()).await.unwrap();
    let row = pv.list(&c, &p("work"), &ctx()).await.unwrap().into_iter().find(|e| e.path == p("work/run.sh")).unwrap();
    assert_eq!((row.size, row.executable), (1, false));
    assert!(matches!(pv.read(&c, &p("work/missing"), 10, &ctx()).await, Err(ComputerError::NotFound(_))));
    assert!(matches!(pv.list(&c, &p("nowhere"), &ctx()).await, Err(ComputerError::NotFound(_))));
    t.cleanup(&c).await;
}

/// Every byte value survives a write and a read.
pub async fn binary_bytes_survive(t: &Target) {
    let (_, c) = t.computer("binary").await;
    let blob = binary_blob();
    t.provider.write(&c, &p("blob.bin"), blob.clone(), false, &ctx()).await.unwrap();
    assert_eq!(t.provider.read(&c, &p("blob.bin"), blob.len() as u64, &ctx()).await.unwrap(), blob);
    t.cleanup(&c).await;
}

/// Escaping paths are refused with one message, and a load carrying an escape changes nothing.
pub async fn rejects_escapes(t: &Target) {
    for bad in ["..", "../x", "a/../../x", ".", "./a", "a/./b", "/etc/passwd", "/home/botdesk/../x", "a\\..\\b", "..\\x", "~root/x"] {
        let err = WorkspacePath::parse(bad).unwrap_err();
        assert_eq!(err.to_string(), format!("{bad:?} escapes the computer workspace"));
    }
    let (_, c) = t.computer("escapes").await;
    t.provider.write(&c, &p("keep.txt"), Bytes::from_static(b"keep"), false, &ctx()).await.unwrap();
    let before = visible(&*t.provider, &c).await;
    // A load that names a path outside the home anywhere in it is refused whole.
    let good = home_stream::Record::File { p: "new.txt".into(), mode: 0o644, mtime: 0, size: 3, data: vec![(0, 3)], more: false };
    for evil in [r#"{"t":"file","p":"../x","mode":420,"mtime":0,"size":0,"data":[]}"#, r#"{"t":"dir","p":"a/../../x","mode":493,"mtime":0}"#] {
        let mut stream = good.line();
        stream.extend_from_slice(b"new");
        stream.extend_from_slice(evil.as_bytes());
        stream.push(b'\n');
        stream.extend(home_stream::Record::End { entries: 2 }.line());
        let merge = home_stream::LoadMode::Merge { into: "in".into() };
        assert!(t.provider.load_home(&c, &merge, Box::pin(std::io::Cursor::new(stream)), &ctx()).await.is_err(), "{evil}");
    }
    assert_eq!(visible(&*t.provider, &c).await, before, "a refused load changed the workspace");
    t.cleanup(&c).await;
}

/// External symlinks are never followed or listed; a save keeps every link as a link.
pub async fn external_symlinks(t: &Target) {
    let (_, c) = t.computer("symlinks").await;
    let pv = &*t.provider;
    pv.write(&c, &p("target.txt"), Bytes::from_static(b"inside"), false, &ctx()).await.unwrap();
    for argv in [["ln", "-s", "/etc", "ext-dir"], ["ln", "-s", "/etc/passwd", "ext-file"], ["ln", "-s", "target.txt", "inside-link"]] {
        assert_eq!(run(t, &c, &argv).await.0.code, 0, "{argv:?}");
    }
    for path in ["ext-dir/evil", "ext-file"] {
        let err = pv.write(&c, &p(path), Bytes::from_static(b"x"), false, &ctx()).await.unwrap_err();
        assert!(err.to_string().contains("escapes the computer workspace"), "{path}: {err}");
        assert!(pv.read(&c, &p(path), 1 << 20, &ctx()).await.is_err());
    }
    assert!(pv.list(&c, &p("ext-dir"), &ctx()).await.is_err());
    let names: Vec<String> = pv.list(&c, &WorkspacePath::root(), &ctx()).await.unwrap().into_iter().map(|e| e.path.to_string()).collect();
    assert!(names.contains(&"inside-link".to_string()) && names.contains(&"target.txt".to_string()), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("ext-")), "external symlinks listed: {names:?}");
    assert_eq!(&pv.read(&c, &p("inside-link"), 100, &ctx()).await.unwrap()[..], b"inside");
    let saved = visible(pv, &c).await;
    assert!(saved.contains(&("ext-dir".to_string(), "symlink -> /etc".to_string())), "{saved:?}");
    assert!(!saved.iter().any(|(path, _)| path.starts_with("ext-dir/")), "a save followed a link out: {saved:?}");
    assert!(saved.contains(&("inside-link".to_string(), "symlink -> target.txt".to_string())), "{saved:?}");
    t.cleanup(&c).await;
}

/// A read one byte under the size fails with no data; equal to the size succeeds.
pub async fn max_bytes_limit(t: &Target) {
    let (_, c) = t.computer("maxbytes").await;
    t.provider.write(&c, &p("hundred.bin"), Bytes::from(vec![7u8; 100]), false, &ctx()).await.unwrap();
    match t.provider.read(&c, &p("hundred.bin"), 99, &ctx()).await {
        Err(ComputerError::TooLarge { size: 100, max: 99, .. }) => {}
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert_eq!(t.provider.read(&c, &p("hundred.bin"), 100, &ctx()).await.unwrap().len(), 100);
    t.cleanup(&c).await;
}

/// A 40 ms timeout answers 124 within a second and kills the whole tree; a genuine 124 is kept.
pub async fn timeout_kills_tree(t: &Target) {
    let (_, c) = t.computer("timeout").await;
    let started = Instant::now();
    let req = ExecRequest::new(["sh", "-c", "sleep 31.4159 & sleep 31.4159"]).timeout(Duration::from_millis(40));
    let (exit, _, _) = exec_collect(&*t.provider, &c, req, &ctx()).await.unwrap();
    let took = started.elapsed();
    assert_eq!(exit.code, 124);
    assert_eq!(exit.outcome, ExecOutcome::TimedOut);
    assert_eq!(exit.message.as_deref(), Some("command timed out after 40 ms"));
    assert!(took < Duration::from_secs(1), "timeout took {took:?}");
    let (probe, out, _) = run(t, &c, &["pgrep", "-c", "-fx", "sleep 31.4159"]).await;
    assert_eq!(out.trim(), "0", "descendants still alive after the timeout (pgrep exit {})", probe.code);
    let (genuine, _, _) = run(t, &c, &["sh", "-c", "exit 124"]).await;
    assert_eq!(genuine, ExecExit::exited(124));
    let bad = ExecRequest::new(["true"]).timeout(Duration::from_secs(3601));
    assert!(matches!(t.provider.exec(&c, bad, None, &ctx()).await, Err(ComputerError::Invalid(_))));
    t.cleanup(&c).await;
}

/// Cancelling a running command answers 130 "command aborted".
pub async fn cancel_gives_130(t: &Target) {
    let (_, c) = t.computer("cancel").await;
    let call = CallCtx::default();
    let cancel = call.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        cancel.cancel();
    });
    let started = Instant::now();
    let exit = t.provider.exec(&c, ExecRequest::new(["sleep", "27.1828"]), None, &call).await.unwrap();
    assert_eq!(exit, ExecExit::cancelled());
    assert!(started.elapsed() < Duration::from_secs(2));
    let (_, out, _) = run(t, &c, &["pgrep", "-c", "-fx", "sleep 27.1828"]).await;
    assert_eq!(out.trim(), "0");
    t.cleanup(&c).await;
}

/// Stop twice and destroy twice are fine; an unknown computer counts as gone; after destroy the
/// next provision is fresh.
pub async fn stop_destroy_idempotent(t: &Target) {
    let (spec, c) = t.computer("lifecycle").await;
    let pv = &*t.provider;
    assert_eq!(pv.status(&c).await.unwrap(), MachineStatus::Running);
    assert!(!pv.provision(&spec, &ctx()).await.unwrap().fresh, "reconnecting must not be fresh");
    pv.stop(&c, &ctx()).await.unwrap();
    pv.stop(&c, &ctx()).await.unwrap();
    assert_eq!(pv.status(&c).await.unwrap(), MachineStatus::Stopped);
    assert!(matches!(pv.exec(&c, ExecRequest::new(["true"]), None, &ctx()).await, Err(ComputerError::NotRunning(_))));
    assert!(!pv.provision(&spec, &ctx()).await.unwrap().fresh, "restarting a stopped computer is not fresh");
    assert_eq!(run(t, &c, &["true"]).await.0.code, 0);
    pv.destroy(&c, &ctx()).await.unwrap();
    pv.destroy(&c, &ctx()).await.unwrap();
    assert_eq!(pv.status(&c).await.unwrap(), MachineStatus::Missing);
    let unknown = ComputerRef::local(ComputerId::new("never-created"));
    pv.stop(&unknown, &ctx()).await.unwrap();
    pv.destroy(&unknown, &ctx()).await.unwrap();
    assert!(pv.provision(&spec, &ctx()).await.unwrap().fresh, "after destroy the next provision is fresh");
    t.cleanup(&c).await;
}

/// An injected failure of provision surfaces as an error; the retry provisions a computer that
/// keeps what is written to it.
pub async fn injected_failures(t: &Target) {
    let faulty = Faulty::new(t.provider.clone());
    let spec = (t.make_spec)(&format!("faults-{}", SEQ.fetch_add(1, Ordering::Relaxed)));
    let c = ComputerRef::from(&spec);
    faulty.arm(Fault::Provision);
    assert_eq!(faulty.provision(&spec, &ctx()).await.unwrap_err(), ComputerError::Injected("provision"));
    faulty.provision(&spec, &ctx()).await.expect("retry after an injected provision failure");
    faulty.write(&c, &p("a/two.bin"), binary_blob(), true, &ctx()).await.unwrap();
    assert_eq!(faulty.read(&c, &p("a/two.bin"), 1 << 20, &ctx()).await.unwrap(), binary_blob());
    t.cleanup(&c).await;
}

/// A binary executable file, folders and an internal link survive a save out of one provider's
/// computer and a restore into another's (or two computers of one provider).
pub async fn home_pairing(src: &Target, dst: &Target) {
    let (_, a) = src.computer("pair-src").await;
    let (_, b) = dst.computer("pair-dst").await;
    let blob = binary_blob();
    src.provider.write(&a, &p("tools/bin/run.bin"), blob.clone(), true, &ctx()).await.unwrap();
    src.provider.write(&a, &p("notes/readme.md"), Bytes::from_static(b"# hi\n"), false, &ctx()).await.unwrap();
    src.provider.create_dir(&a, &p("empty"), &ctx()).await.unwrap();
    assert_eq!(run(src, &a, &["ln", "-s", "tools/bin/run.bin", "run-link"]).await.0.code, 0);
    let stream = saved(&*src.provider, &a).await.unwrap();
    let restore = home_stream::LoadMode::Restore;
    let summary = dst.provider.load_home(&b, &restore, Box::pin(std::io::Cursor::new(stream)), &ctx()).await.unwrap();
    assert!(summary.files >= 2 && summary.links >= 1, "{summary:?}");
    assert_eq!(dst.provider.read(&b, &p("tools/bin/run.bin"), blob.len() as u64, &ctx()).await.unwrap(), blob);
    let row = dst.provider.list(&b, &p("tools/bin"), &ctx()).await.unwrap();
    assert_eq!(row, vec![FileEntry { path: p("tools/bin/run.bin"), kind: FileKind::File, size: blob.len() as u64, executable: true }]);
    assert_eq!(visible(&*src.provider, &a).await, visible(&*dst.provider, &b).await);
    src.cleanup(&a).await;
    dst.cleanup(&b).await;
}

/// A home saved out of one computer loads whole into another (restore); a stream cut short before
/// its `end` record changes nothing.
pub async fn home_stream_round_trip(t: &Target) {
    let (_, a) = t.computer("home-src").await;
    let (_, b) = t.computer("home-dst").await;
    let blob = binary_blob();
    t.provider.write(&a, &p("tools/run.bin"), blob.clone(), true, &ctx()).await.unwrap();
    t.provider.write(&a, &p("notes/readme.md"), Bytes::from_static(b"# hi\n"), false, &ctx()).await.unwrap();
    assert_eq!(run(t, &a, &["ln", "-s", "notes/readme.md", "readme-link"]).await.0.code, 0);
    let stream = saved(&*t.provider, &a).await.unwrap();
    t.provider.write(&b, &p("old.txt"), Bytes::from_static(b"replaced by the restore"), false, &ctx()).await.unwrap();
    // Cut short: nothing changes.
    let cut = stream[..stream.len() - 10].to_vec();
    assert!(t.provider.load_home(&b, &home_stream::LoadMode::Restore, Box::pin(std::io::Cursor::new(cut)), &ctx()).await.is_err());
    assert_eq!(t.provider.read(&b, &p("old.txt"), 100, &ctx()).await.unwrap(), Bytes::from_static(b"replaced by the restore"));
    let summary = t.provider.load_home(&b, &home_stream::LoadMode::Restore, Box::pin(std::io::Cursor::new(stream)), &ctx()).await.unwrap();
    assert!(summary.files >= 2 && summary.links >= 1, "{summary:?}");
    assert_eq!(t.provider.read(&b, &p("tools/run.bin"), blob.len() as u64, &ctx()).await.unwrap(), blob);
    assert!(t.provider.read(&b, &p("old.txt"), 100, &ctx()).await.is_err(), "a restore makes the home exactly the checkpoint");
    assert_eq!(visible(&*t.provider, &a).await, visible(&*t.provider, &b).await);
    t.cleanup(&a).await;
    t.cleanup(&b).await;
}

/// Expands to one `#[tokio::test]` per scenario for the target that `$make` (an async expression
/// producing a [`Target`]) builds.
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr) => {
        $crate::conformance_suite!(@each $make; two_computers_distinct_ids, files_round_trip, binary_bytes_survive,
            rejects_escapes, external_symlinks, max_bytes_limit, timeout_kills_tree, cancel_gives_130,
            stop_destroy_idempotent, injected_failures, home_stream_round_trip);
    };
    (@each $make:expr; $($name:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let target = $make.await;
                $crate::$name(&target).await;
            }
        )*
    };
}
