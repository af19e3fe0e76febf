//! A deterministic, in-memory [`ComputerProvider`] for engine tests, and [`Faulty`], a wrapper that
//! injects failures into any provider.
//!
//! Its desktops show a fixed image (a grey screen with a dark bar along the bottom, the size of
//! [`action::SCREEN`]) and record every action they are given ([`FakeProvider::actions`]); each
//! batch counts as a change of the screen, so the next observation has a new frame id. It has no
//! screen gateway: its screen port is 0, which no viewer reaches, and it has no page browser.
//!
//! The fake runs no programs. Its exec understands a small documented set of commands, enough for
//! the conformance scenarios: `true`, `false`, `echo`, `printenv NAME`, `pwd`, `cat FILE`,
//! `sleep SECS`, `ln -s TARGET LINK`, `pgrep -c -fx CMDLINE`, and `sh -c SCRIPT` where SCRIPT is
//! simple commands separated by `;` or `&` (background), plus `exit N` and `>&2` redirection.

mod faulty;
pub use faulty::{Fault, Faulty, Hold};

use async_trait::async_trait;
use botdesk_core::*;
use bytes::Bytes;
use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::Duration,
};
use tokio::task::JoinSet;

#[derive(Debug, Clone)]
enum Node {
    File { bytes: Bytes, executable: bool },
    Dir,
    Symlink(String),
}

#[derive(Default)]
struct Machine {
    running: bool,
    files: BTreeMap<WorkspacePath, Node>,
    /// Command lines of live background "processes" (for `pgrep`).
    procs: Arc<Mutex<Vec<String>>>,
    generation: u64,
    /// Open desktops by slot: the actions each has been given, and in how many batches.
    desktops: BTreeMap<u32, (Vec<action::Action>, u64)>,
    /// The bots' network policies as last set (the fake has no network to apply them to).
    network: Vec<BotNetwork>,
}

/// The fake screen's pixels, encoded once per format.
fn fixed_image(format: ImageFormat) -> Bytes {
    static PNG: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    static JPEG: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    let (w, h) = action::SCREEN;
    let rgb = || -> Vec<u8> { (0..h).flat_map(|y| std::iter::repeat_n(if y >= h - 30 { 40 } else { 200 }, w as usize * 3)).collect() };
    match format {
        ImageFormat::Png => PNG
            .get_or_init(|| {
                let mut out = Vec::new();
                let mut enc = png::Encoder::new(&mut out, w, h);
                enc.set_color(png::ColorType::Rgb);
                enc.set_depth(png::BitDepth::Eight);
                enc.write_header().and_then(|mut wr| wr.write_image_data(&rgb())).expect("the fixed image encodes");
                Bytes::from(out)
            })
            .clone(),
        ImageFormat::Jpeg { .. } => JPEG
            .get_or_init(|| {
                let mut out = Vec::new();
                jpeg_encoder::Encoder::new(&mut out, 80).encode(&rgb(), w as u16, h as u16, jpeg_encoder::ColorType::Rgb).expect("the fixed image encodes");
                Bytes::from(out)
            })
            .clone(),
    }
}

#[derive(Default)]
pub struct FakeProvider {
    machines: Mutex<HashMap<ComputerId, Machine>>,
    created: Mutex<u64>,
    /// Computers whose home saves hang (as a SIGSTOPped helper or a host that drops packets).
    stalled: Mutex<std::collections::HashSet<ComputerId>>,
}

const MAX_HOPS: usize = 40;

impl FakeProvider {
    pub fn new() -> Self {
        Self::default()
    }

    /// A look at `slot`'s desktop: the same fixed image, a frame named by the batches done.
    fn look(&self, c: &ComputerRef, slot: u32, format: ImageFormat) -> Result<Observation> {
        let batches = self.with_machine(c, |m| {
            m.desktops.get(&slot).map(|(_, batches)| *batches).ok_or_else(|| ComputerError::Invalid(format!("display :{slot} is not open")))
        })?;
        let (width, height) = action::SCREEN;
        Ok(Observation {
            frame_id: format!("fake-{slot}-{batches}"),
            width,
            height,
            cursor: (0, 0),
            active_window: Some("fake desktop".into()),
            format,
            image: Some(fixed_image(format)),
        })
    }

    /// The fake refuses nothing: no refusals, in a boot of its own.
    fn refusals(&self, c: &ComputerRef, _user: BotUser, _after: u64) -> Result<NetRefusals> {
        self.with_machine(c, |_| Ok(NetRefusals { boot: "fake".into(), ..Default::default() }))
    }

    /// Makes computer `c`'s home saves hang until `stall` is false again.
    pub fn stall_saves(&self, c: &ComputerId, stall: bool) {
        let mut s = self.stalled.lock().unwrap();
        if stall {
            s.insert(c.clone());
        } else {
            s.remove(c);
        }
    }

    /// Every action given to `slot`'s desktop on computer `c` since it opened, in order.
    pub fn actions(&self, c: &ComputerId, slot: u32) -> Vec<action::Action> {
        self.machines.lock().unwrap().get(c).and_then(|m| m.desktops.get(&slot).map(|(actions, _)| actions.clone())).unwrap_or_default()
    }

    /// The computers and slots with an open desktop.
    pub fn open_desktops(&self) -> Vec<(ComputerId, u32)> {
        let all = self.machines.lock().unwrap();
        all.iter().flat_map(|(c, m)| m.desktops.keys().map(move |slot| (c.clone(), *slot))).collect()
    }

    fn with_machine<T>(&self, c: &ComputerRef, f: impl FnOnce(&mut Machine) -> Result<T>) -> Result<T> {
        let mut all = self.machines.lock().unwrap();
        let m = all.get_mut(&c.id).ok_or_else(|| ComputerError::NotRunning(c.id.to_string()))?;
        if !m.running {
            return Err(ComputerError::NotRunning(c.id.to_string()));
        }
        f(m)
    }
}

/// Follows internal symlinks along `path` (the last component too when `follow_last`).
/// Where `path` leads in `files`, as the computer's helper walks it (the fixtures' `walks` in
/// paths.json hold both to one rule): each link followed while it stays in the home (the last
/// one only when `follow_last`), at most [`MAX_HOPS`] of them; a file on the way is not a folder.
fn resolve(files: &BTreeMap<WorkspacePath, Node>, path: &WorkspacePath, follow_last: bool) -> Result<WorkspacePath> {
    let mut current = path.clone();
    let mut hops = 0;
    'walk: loop {
        let parts: Vec<&str> = current.components().collect();
        let mut prefix = WorkspacePath::root();
        for (i, part) in parts.iter().enumerate() {
            prefix = prefix.join_path(&WorkspacePath::parse(part)?);
            let last = i + 1 == parts.len();
            match files.get(&prefix) {
                Some(Node::Symlink(target)) if !last || follow_last => {
                    hops += 1;
                    let dest = prefix.symlink_destination(target).ok_or_else(|| PathError::Escapes(path.to_string()))?;
                    if hops > MAX_HOPS {
                        return Err(ComputerError::Invalid(format!("{path}: too many levels of symbolic links")));
                    }
                    let rest: Vec<&str> = parts[i + 1..].to_vec();
                    current = if rest.is_empty() { dest } else { dest.join_path(&WorkspacePath::parse(&rest.join("/"))?) };
                    continue 'walk;
                }
                Some(Node::File { .. }) if !last => return Err(ComputerError::Invalid(format!("{prefix} is not a directory"))),
                _ => {}
            }
        }
        return Ok(current);
    }
}

fn mkdirs(files: &mut BTreeMap<WorkspacePath, Node>, dir: &WorkspacePath) -> Result<()> {
    let mut prefix = WorkspacePath::root();
    for part in dir.components() {
        prefix = prefix.join_path(&WorkspacePath::parse(part)?);
        match files.get(&prefix) {
            None => {
                files.insert(prefix.clone(), Node::Dir);
            }
            Some(Node::Dir) => {}
            Some(_) => return Err(ComputerError::Invalid(format!("{prefix} is not a directory"))),
        }
    }
    Ok(())
}

#[async_trait]
impl ComputerProvider for FakeProvider {
    fn kind(&self) -> &'static str {
        "fake"
    }

    async fn provision(&self, spec: &ComputerSpec, _ctx: &CallCtx) -> Result<Provisioned> {
        let mut all = self.machines.lock().unwrap();
        let fresh = !all.contains_key(&spec.id);
        let m = all.entry(spec.id.clone()).or_default();
        if fresh {
            let mut n = self.created.lock().unwrap();
            *n += 1;
            m.generation = *n;
        }
        m.running = true;
        Ok(Provisioned { fresh, provider_ref: format!("fake-{}-{}", spec.id, m.generation) })
    }

    async fn prepare(&self, c: &ComputerRef, _ctx: &CallCtx) -> Result<()> {
        self.with_machine(c, |_| Ok(()))
    }

    async fn status(&self, c: &ComputerRef) -> Result<MachineStatus> {
        Ok(match self.machines.lock().unwrap().get(&c.id) {
            None => MachineStatus::Missing,
            Some(m) if m.running => MachineStatus::Running,
            Some(_) => MachineStatus::Stopped,
        })
    }

    async fn stop(&self, c: &ComputerRef, _ctx: &CallCtx) -> Result<()> {
        if let Some(m) = self.machines.lock().unwrap().get_mut(&c.id) {
            m.running = false;
            m.procs.lock().unwrap().clear();
            m.desktops.clear();
        }
        Ok(())
    }

    async fn destroy(&self, c: &ComputerRef, _ctx: &CallCtx) -> Result<()> {
        self.machines.lock().unwrap().remove(&c.id);
        Ok(())
    }

    async fn open_desktop(&self, c: &ComputerRef, _bot: &BotId, slot: u32, _view_token: &str, _ctx: &CallCtx) -> Result<DesktopInfo> {
        self.with_machine(c, |m| {
            m.desktops.entry(slot).or_default();
            Ok(DesktopInfo { display: slot, slot })
        })
    }

    async fn release_desktop(&self, c: &ComputerRef, slot: u32, _ctx: &CallCtx) -> Result<()> {
        if let Some(m) = self.machines.lock().unwrap().get_mut(&c.id) {
            m.desktops.remove(&slot);
        }
        Ok(())
    }

    async fn control_transport(&self, c: &ComputerRef, slot: u32, _token: &str, _ctx: &CallCtx) -> Result<()> {
        self.with_machine(c, |m| m.desktops.get(&slot).map(drop).ok_or_else(|| ComputerError::Invalid(format!("display :{slot} is not open"))))
    }

    async fn expire_token_at(&self, c: &ComputerRef, _token: &str, _expires_ms: i64) -> Result<()> {
        self.with_machine(c, |_| Ok(()))
    }

    async fn revoke_token(&self, _c: &ComputerRef, _token: &str, _ctx: &CallCtx) -> Result<()> {
        Ok(())
    }

    /// There is no gateway: port 0, which no viewer can reach.
    async fn screen(&self, c: &ComputerRef, token: &str, control: bool) -> Result<ScreenAccess> {
        self.with_machine(c, |_| Ok(ScreenAccess { port: 0, token: token.to_string(), control }))
    }

    async fn observe(&self, c: &ComputerRef, slot: u32, format: ImageFormat, _ctx: &CallCtx) -> Result<Observation> {
        self.look(c, slot, format)
    }

    /// The batch is noted; the look and the refusals after it are what `observe` and
    /// `network_refusals` would answer, in the same call (as a real computer's one request).
    async fn act(&self, c: &ComputerRef, slot: u32, actions: &[action::Action], _settle_ms: u64, then: &ActThen, _ctx: &CallCtx) -> Result<ActAnswer> {
        self.with_machine(c, |m| {
            let (done, batches) = m.desktops.get_mut(&slot).ok_or_else(|| ComputerError::Invalid(format!("display :{slot} is not open")))?;
            done.extend_from_slice(actions);
            *batches += 1;
            Ok(())
        })?;
        let look = match then.look {
            Some(format) => Some(self.look(c, slot, format)?),
            None => None,
        };
        let refusals = match then.refusals {
            Some((user, after)) => Some(self.refusals(c, user, after)?),
            None => None,
        };
        Ok(ActAnswer { settled: action::Settled::Unwatched, look, refusals })
    }

    async fn exec(&self, c: &ComputerRef, req: ExecRequest, out: OutputSink, ctx: &CallCtx) -> Result<ExecExit> {
        req.validate()?;
        let procs = self.with_machine(c, |m| match resolve(&m.files, &req.cwd, true)? {
            p if p.is_root() || matches!(m.files.get(&p), Some(Node::Dir)) => Ok(m.procs.clone()),
            p => Err(ComputerError::NotFound(p.to_string())),
        })?;
        let mut env: HashMap<String, String> =
            HashMap::from([("BOTDESK_COMPUTER_ID".into(), c.id.to_string()), ("HOME".into(), HOME.into()), ("USER".into(), "botdesk".into())]);
        env.extend(req.env.iter().cloned());
        let mut shell = Shell { provider: self, computer: c, cwd: req.cwd.clone(), env, out, procs, background: JoinSet::new() };
        let timeout = req.timeout;
        let argv = req.argv.clone();
        let result = tokio::select! {
            code = shell.run(argv) => ExecExit::exited(code),
            _ = tokio::time::sleep(timeout) => ExecExit::timed_out(timeout),
            _ = ctx.cancel.cancelled() => ExecExit::cancelled(),
        };
        if result.outcome == ExecOutcome::Exited {
            shell.background.detach_all();
        } else {
            // The whole tree dies, and is gone before we answer (abort alone is asynchronous).
            shell.background.shutdown().await;
        }
        Ok(result)
    }

    async fn list(&self, c: &ComputerRef, dir: &WorkspacePath, _ctx: &CallCtx) -> Result<Vec<FileEntry>> {
        self.with_machine(c, |m| {
            let real = resolve(&m.files, dir, true)?;
            if !real.is_root() && !matches!(m.files.get(&real), Some(Node::Dir)) {
                return Err(ComputerError::NotFound(dir.to_string()));
            }
            let mut out = vec![];
            for (p, node) in m.files.range(real.clone()..) {
                if !p.starts_with(&real) {
                    break;
                }
                if p == &real || p.parent().as_ref() != Some(&real) {
                    continue;
                }
                let shown = dir.join_path(&WorkspacePath::parse(p.file_name().unwrap_or_default())?);
                out.push(match node {
                    Node::File { bytes, executable } => FileEntry { path: shown, kind: FileKind::File, size: bytes.len() as u64, executable: *executable },
                    Node::Dir => FileEntry { path: shown, kind: FileKind::Dir, size: 0, executable: false },
                    Node::Symlink(t) if p.symlink_destination(t).is_some() => FileEntry { path: shown, kind: FileKind::Symlink, size: 0, executable: false },
                    Node::Symlink(_) => continue,
                });
            }
            Ok(out)
        })
    }

    async fn create_dir(&self, c: &ComputerRef, dir: &WorkspacePath, _ctx: &CallCtx) -> Result<()> {
        self.with_machine(c, |m| {
            let real = resolve(&m.files, dir, true)?;
            mkdirs(&mut m.files, &real)
        })
    }

    async fn set_network(&self, c: &ComputerRef, bots: &[BotNetwork], _ctx: &CallCtx) -> Result<()> {
        self.with_machine(c, |m| {
            m.network = bots.to_vec();
            Ok(())
        })
    }
    /// The fake refuses nothing: no connection is ever made.
    async fn network_refusals(&self, c: &ComputerRef, _user: BotUser, _after: u64) -> Result<NetRefusals> {
        self.with_machine(c, |_| Ok(NetRefusals { boot: "fake".into(), ..Default::default() }))
    }
    /// The fake has no users: it makes the folders a Team computer's owners need (`shared/` and
    /// each bot's folder).
    async fn set_owners(&self, c: &ComputerRef, owners: &HomeOwners, _ctx: &CallCtx) -> Result<()> {
        if owners.scope != ComputerScope::Team {
            return Ok(());
        }
        let folders: Vec<WorkspacePath> = std::iter::once(WorkspacePath::parse("shared").expect("a path"))
            .chain(owners.bots.iter().map(|o| botdesk_core::path::bot_folder(&o.bot)))
            .collect();
        self.with_machine(c, |m| {
            for dir in &folders {
                // A bot that replaced its own folder (with a link, say) breaks only its own work.
                if let Ok(real) = resolve(&m.files, dir, true) {
                    let _ = mkdirs(&mut m.files, &real);
                }
            }
            Ok(())
        })
    }

    async fn read(&self, c: &ComputerRef, path: &WorkspacePath, max_bytes: u64, _ctx: &CallCtx) -> Result<Bytes> {
        self.with_machine(c, |m| {
            let real = resolve(&m.files, path, true)?;
            match m.files.get(&real) {
                Some(Node::File { bytes, .. }) if bytes.len() as u64 > max_bytes => {
                    Err(ComputerError::TooLarge { path: path.to_string(), size: bytes.len() as u64, max: max_bytes })
                }
                Some(Node::File { bytes, .. }) => Ok(bytes.clone()),
                Some(_) => Err(ComputerError::Invalid(format!("{path} is not a regular file"))),
                None => Err(ComputerError::NotFound(path.to_string())),
            }
        })
    }

    async fn write(&self, c: &ComputerRef, path: &WorkspacePath, data: Bytes, executable: bool, _ctx: &CallCtx) -> Result<()> {
        if path.is_root() {
            return Err(ComputerError::Invalid("cannot write to the workspace root".into()));
        }
        self.with_machine(c, |m| {
            let real = resolve(&m.files, path, true)?;
            if matches!(m.files.get(&real), Some(Node::Dir)) {
                return Err(ComputerError::Invalid(format!("{path} is a directory")));
            }
            mkdirs(&mut m.files, &real.parent().unwrap_or_default())?;
            m.files.insert(real, Node::File { bytes: data, executable });
            Ok(())
        })
    }

    /// The whole tree as home-stream records (no `same`: the fake keeps no times).
    async fn save_home(&self, c: &ComputerRef, _manifest: HomeIn, _ctx: &CallCtx) -> Result<HomeOut> {
        use botdesk_core::home_stream::Record;
        while self.stalled.lock().unwrap().contains(&c.id) {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let out = self.with_machine(c, |m| {
            let mut out = Vec::new();
            // In walk order, as a computer sends them: a folder's entries right after it.
            let mut all: Vec<(String, &Node)> = m.files.iter().map(|(p, n)| (p.to_string(), n)).collect();
            all.sort_by(|(a, _), (b, _)| a.split('/').cmp(b.split('/')));
            for (p, n) in all {
                let rec = match n {
                    Node::Dir => Record::Dir { p, mode: 0o755, mtime: 0 },
                    Node::Symlink(target) => Record::Link { p, target: target.clone(), mtime: 0 },
                    Node::File { bytes, executable } => {
                        let size = bytes.len() as u64;
                        let data = if size == 0 { vec![] } else { vec![(0, size)] };
                        out.extend(Record::File { p, mode: if *executable { 0o755 } else { 0o644 }, mtime: 0, size, data, more: false }.line());
                        out.extend_from_slice(bytes);
                        continue;
                    }
                };
                out.extend(rec.line());
            }
            out.extend(Record::End { entries: m.files.len() as u64 }.line());
            Ok(out)
        })?;
        Ok(HomeOut { records: Box::pin(std::io::Cursor::new(out)), finished: Box::pin(async { Ok(()) }) })
    }

    /// Applies a home stream like the real helper: nothing unless it ended with `end`.
    async fn load_home(&self, c: &ComputerRef, mode: &home_stream::LoadMode, mut records: HomeIn, _ctx: &CallCtx) -> Result<home_stream::LoadSummary> {
        use botdesk_core::home_stream::{read_header, LoadMode, LoadSummary, Record};
        use tokio::io::AsyncReadExt;
        let mut all = Vec::new();
        records.read_to_end(&mut all).await.map_err(|e| ComputerError::Provider(e.to_string()))?;
        let bad = |e: std::io::Error| ComputerError::Invalid(e.to_string());
        let mut r = &all[..];
        let mut staged: Vec<(WorkspacePath, Node)> = vec![];
        let mut sum = LoadSummary::default();
        loop {
            match read_header(&mut r).map_err(bad)? {
                None => return Err(ComputerError::Invalid("the home stream ended early; nothing was changed".into())),
                Some(Record::End { .. }) => break,
                Some(Record::Dir { p, .. }) => {
                    sum.dirs += 1;
                    staged.push((WorkspacePath::parse(&p)?, Node::Dir));
                }
                Some(Record::Link { p, target, .. }) => {
                    sum.links += 1;
                    staged.push((WorkspacePath::parse(&p)?, Node::Symlink(target)));
                }
                Some(Record::File { p, mode, size, data, .. }) => {
                    let mut bytes = vec![0u8; size as usize];
                    for (off, len) in data {
                        std::io::Read::read_exact(&mut r, &mut bytes[off as usize..(off + len) as usize]).map_err(bad)?;
                    }
                    sum.files += 1;
                    sum.bytes += size;
                    staged.push((WorkspacePath::parse(&p)?, Node::File { bytes: bytes.into(), executable: mode & 0o100 != 0 }));
                }
                Some(other) => return Err(ComputerError::Invalid(format!("a {other:?} record cannot be loaded"))),
            }
        }
        self.with_machine(c, |m| {
            let (into, fresh) = match mode {
                LoadMode::Restore => (WorkspacePath::root(), true),
                LoadMode::Merge { into } => (WorkspacePath::parse(into)?, false),
                LoadMode::Replace { into } | LoadMode::Put { into, .. } => (WorkspacePath::parse(into)?, matches!(mode, LoadMode::Replace { .. })),
            };
            let mut files = m.files.clone();
            if let Some(Node::Symlink(_)) = files.get(&into) {
                return Err(PathError::Escapes(into.to_string()).into());
            }
            if fresh {
                files.retain(|p, _| !p.starts_with(&into));
            }
            if let LoadMode::Put { names, .. } = mode {
                // Each name becomes what the stream holds for it, or nothing.
                for name in names {
                    let dest = into.child(name)?;
                    files.retain(|q, _| !q.starts_with(&dest));
                }
            }
            mkdirs(&mut files, &into)?;
            for (p, node) in staged {
                let dest = into.join_path(&p);
                match (files.get(&dest), &node) {
                    (Some(Node::Dir), Node::Dir) => {}
                    (Some(Node::Dir), _) | (Some(_), Node::Dir) => sum.kept_newer.push(p.to_string()),
                    _ => {
                        files.insert(dest, node);
                    }
                }
            }
            m.files = files;
            Ok(sum)
        })
    }
}

/// The fake's tiny command interpreter.
struct Shell<'a> {
    provider: &'a FakeProvider,
    computer: &'a ComputerRef,
    cwd: WorkspacePath,
    env: HashMap<String, String>,
    out: OutputSink,
    procs: Arc<Mutex<Vec<String>>>,
    background: JoinSet<()>,
}

/// Removes a "process" from the table when its task ends or is aborted.
struct ProcGuard(Arc<Mutex<Vec<String>>>, String);
impl Drop for ProcGuard {
    fn drop(&mut self) {
        let mut v = self.0.lock().unwrap();
        if let Some(i) = v.iter().position(|p| p == &self.1) {
            v.remove(i);
        }
    }
}

async fn fake_sleep(procs: Arc<Mutex<Vec<String>>>, argv: &[String]) -> i32 {
    let Some(secs) = argv.get(1).and_then(|s| s.parse::<f64>().ok()) else { return 1 };
    let cmdline = argv.join(" ");
    procs.lock().unwrap().push(cmdline.clone());
    let _guard = ProcGuard(procs, cmdline);
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    0
}

impl Shell<'_> {
    fn emit(&self, stream: StreamKind, text: String) {
        if let Some(tx) = &self.out {
            let _ = tx.send(ExecOutput { stream, data: Bytes::from(text) });
        }
    }

    async fn run(&mut self, argv: Vec<String>) -> i32 {
        if argv.first().map(String::as_str) == Some("sh") && argv.get(1).map(String::as_str) == Some("-c") {
            return self.script(argv.get(2).cloned().unwrap_or_default()).await;
        }
        self.simple(argv, StreamKind::Stdout).await
    }

    async fn script(&mut self, script: String) -> i32 {
        let mut code = 0;
        let mut piece = String::new();
        let mut chars = script.chars().peekable();
        let mut pieces = vec![];
        while let Some(ch) = chars.next() {
            match ch {
                ';' => pieces.push((std::mem::take(&mut piece), false)),
                '&' if chars.peek() != Some(&'2') && !piece.ends_with('>') => pieces.push((std::mem::take(&mut piece), true)),
                c => piece.push(c),
            }
        }
        pieces.push((piece, false));
        for (text, background) in pieces {
            let mut words: Vec<String> = text.split_whitespace().map(|w| w.trim_matches('\'').to_string()).collect();
            if words.is_empty() {
                continue;
            }
            let stream = if words.last().map(String::as_str) == Some(">&2") {
                words.pop();
                StreamKind::Stderr
            } else {
                StreamKind::Stdout
            };
            if words[0] == "exit" {
                return words.get(1).and_then(|n| n.parse().ok()).unwrap_or(0);
            }
            if background {
                if words[0] == "sleep" {
                    let procs = self.procs.clone();
                    self.background.spawn(async move {
                        fake_sleep(procs, &words).await;
                    });
                }
                continue;
            }
            code = self.simple(words, stream).await;
        }
        code
    }

    async fn simple(&mut self, argv: Vec<String>, stream: StreamKind) -> i32 {
        let arg = |i: usize| argv.get(i).cloned().unwrap_or_default();
        match argv[0].as_str() {
            "true" => 0,
            "false" => 1,
            "echo" => {
                self.emit(stream, format!("{}\n", argv[1..].join(" ")));
                0
            }
            "pwd" => {
                self.emit(stream, format!("{}\n", self.cwd.in_computer()));
                0
            }
            "printenv" => match self.env.get(&arg(1)) {
                Some(v) => {
                    self.emit(stream, format!("{v}\n"));
                    0
                }
                None => 1,
            },
            "sleep" => fake_sleep(self.procs.clone(), &argv).await,
            "pgrep" if arg(1) == "-c" && arg(2) == "-fx" => {
                let n = self.procs.lock().unwrap().iter().filter(|p| **p == argv[3..].join(" ")).count();
                self.emit(stream, format!("{n}\n"));
                if n > 0 {
                    0
                } else {
                    1
                }
            }
            "cat" => {
                let Ok(p) = self.cwd.join(&arg(1)) else { return 1 };
                match self.provider.read(self.computer, &p, u64::MAX, &CallCtx::default()).await {
                    Ok(b) => {
                        if let Some(tx) = &self.out {
                            let _ = tx.send(ExecOutput { stream, data: b });
                        }
                        0
                    }
                    Err(e) => {
                        self.emit(StreamKind::Stderr, format!("cat: {e}\n"));
                        1
                    }
                }
            }
            "ln" if arg(1) == "-s" => {
                let Ok(link) = self.cwd.join(&arg(3)) else {
                    self.emit(StreamKind::Stderr, "ln: link escapes the workspace\n".into());
                    return 1;
                };
                let target = arg(2);
                let r = self.provider.with_machine(self.computer, |m| {
                    mkdirs(&mut m.files, &link.parent().unwrap_or_default())?;
                    m.files.insert(link, Node::Symlink(target));
                    Ok(())
                });
                i32::from(r.is_err())
            }
            other => {
                self.emit(StreamKind::Stderr, format!("fake: {other}: command not found\n"));
                127
            }
        }
    }
}

#[cfg(test)]
mod walks {
    use super::*;

    /// The fixtures' walks (paths.json, which the helper and the reader replay too) in the fake.
    #[test]
    fn paths_walk_as_the_fixtures_say() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../infra/sandboxes/computer/paths.json");
        let fx: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut files = BTreeMap::new();
        let at = |e: &serde_json::Value, k: &str| e[k].as_str().map(|p| WorkspacePath::parse(p).unwrap());
        for e in fx["walks"]["tree"].as_array().unwrap() {
            let node = match (at(e, "dir"), at(e, "file")) {
                (Some(p), _) => (p, Node::Dir),
                (_, Some(p)) => (p, Node::File { bytes: Bytes::new(), executable: false }),
                _ => (at(e, "link").unwrap(), Node::Symlink(e["target"].as_str().unwrap().into())),
            };
            files.insert(node.0, node.1);
        }
        let cases = fx["walks"]["cases"].as_array().unwrap();
        assert!(cases.len() >= 9);
        for case in cases {
            let walked = resolve(&files, &WorkspacePath::parse(case["path"].as_str().unwrap()).unwrap(), true);
            let got = walked.map_or_else(|e| e.to_string(), |p| format!("lands {p}"));
            let want = match case["lands"].as_str() {
                Some(p) => format!("lands {p}"),
                None => case["error"].as_str().unwrap().to_string(),
            };
            assert!(got.contains(&want), "walk {}: {got}, not {want}", case["path"]);
        }
    }
}
