//! Workspace checkpoints. A computer works on its home volume, which only the
//! computer mounts; its home store `DATA_DIR/homes/<home-key>/` on this machine keeps immutable
//! checkpoint versions `v<N>` and a `current` symlink, the person's own files.
//!
//! A checkpoint closes the computer's browsers gracefully (so cookies and profiles are on disk),
//! sends the computer the manifest of the previous version (from its index `v<N>.index`) and
//! receives its home as a stream (`botdesk-helper save`; unchanged files come as `same`) into
//! `v<N+1>.partial`, which meanwhile was made as hard links to the previous version, so only
//! changes are written. It syncs, renames it, swaps `current` with one rename and moves the
//! versions the person's retention no longer keeps (`versions::kept`) to `trash/`, removed after
//! the checkpoint returned (`Engine::settle` waits for that). The
//! stream has an idle bound and a total bound; a stall names the file it was stuck on. Checkpoints
//! of one home are serialised, across processes too (a lock file). A new home volume (a destroyed
//! computer, a new one) is restored from `current` through the computer (`botdesk-helper load`)
//! before anything else runs there. Skipped: caches and lock files inside `.browser-profiles/`,
//! and FIFOs, sockets and devices (named in the report).

use std::future::Future;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use botdesk_core::home_stream::{LoadMode, LoadSummary};
use botdesk_core::{BotUser, CallCtx, ComputerId, ComputerRef, ExecRequest, FolderOwner, HomeIn, MachineStatus, WorkspacePath};
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};
use tokio_util::io::SyncIoBridge;

use crate::error::blocking;
use crate::home_store::{self, Received, Skipped};
use crate::versions::{Changed, Meta, Why};
use crate::{Engine, EngineError, ErrorCode, Result, Settings};

/// The longest a checkpoint may take in all.
pub(crate) const TOTAL_BOUND: Duration = Duration::from_secs(30 * 60);

/// Which browsers a checkpoint closes first, so their cookies and profiles are whole on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Browsers {
    /// Every browser on the computer (stop, destroy, idle suspend, explicit checkpoint).
    All,
    /// Only the one on this display (a run ending on a Team computer leaves the others alone).
    OnDisplay(u32),
    /// None (the bot whose work is saved has no browser there).
    None,
}

/// What a checkpoint is taken before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Before {
    Stop,
    Suspend,
    Destroy,
}

impl Before {
    pub(crate) fn doing(self) -> &'static str {
        match self {
            Before::Stop => "stopping",
            Before::Suspend => "suspending",
            Before::Destroy => "destroying",
        }
    }
}

/// What one checkpoint or restore did.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CheckpointReport {
    pub version: u64,
    pub files: u64,
    pub bytes: u64,
    /// Files written (the others were unchanged and linked from the previous version).
    pub copied: u64,
    pub millis: u64,
    /// What the computer did not hand over: FIFOs, sockets, devices, unreadable files (the first 100).
    pub skipped: Vec<Skipped>,
    /// What changed since the version before.
    pub changed: Changed,
}

/// A reader that fails with `TimedOut` when nothing arrives for `idle`, or past `deadline`.
pub(crate) struct Bounded<R> {
    inner: R,
    idle: Duration,
    deadline: tokio::time::Instant,
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl<R> Bounded<R> {
    pub(crate) fn new(inner: R, idle: Duration, total: Duration) -> Self {
        let now = tokio::time::Instant::now();
        Self { inner, idle, deadline: now + total, timer: Box::pin(tokio::time::sleep_until((now + idle).min(now + total))) }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Bounded<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    let next = (tokio::time::Instant::now() + self.idle).min(self.deadline);
                    self.timer.as_mut().reset(next);
                }
                Poll::Ready(r)
            }
            Poll::Pending => match self.timer.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    let why = if tokio::time::Instant::now() >= self.deadline {
                        format!("the checkpoint took longer than {} s", TOTAL_BOUND.as_secs())
                    } else {
                        format!("nothing came for {} s", self.idle.as_secs())
                    };
                    Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::TimedOut, why)))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

/// Which part of a stored version goes into a computer, and how.
pub(crate) struct Sending {
    /// The version's folder.
    pub root: PathBuf,
    /// The subtree sent (`""`: all of it). It must be a real folder in the version.
    pub sub: String,
    /// What goes (relative to `sub`).
    pub keep: Box<dyn Fn(&str) -> bool + Send>,
    pub mode: LoadMode,
    /// The bot whose folder (or profile) it goes into, and its uid there; None: the whole home of
    /// a computer that is starting (nothing runs there yet).
    pub for_bot: Option<FolderOwner>,
}

pub(crate) fn everything(_: &str) -> bool {
    true
}

/// The latest version of a home store when a checkpoint starts: what the new one is linked from.
struct Previous {
    version: u64,
    index: PathBuf,
    root: PathBuf,
}

impl Previous {
    /// Its tree and its index, as the home store's walk takes them.
    fn paths(&self) -> (&Path, &Path) {
        (self.root.as_path(), self.index.as_path())
    }
}

/// Where a checkpoint's new version is received: its tree and its index, both partial until
/// committed.
struct NewVersion {
    partial: PathBuf,
    index: PathBuf,
}

impl Engine {
    /// Checkpoints a computer's workspace: browsers closed gracefully first, then its home
    /// streamed into a new version of its home store. Serialised per home, also across processes.
    pub async fn checkpoint(&self, computer: &ComputerId) -> Result<CheckpointReport> {
        self.checkpoint_closing(computer, Browsers::All, Why::Asked).await
    }

    /// A checkpoint that first closes `browsers`, made for `why`. The computer must be running on
    /// its home volume.
    pub(crate) async fn checkpoint_closing(&self, computer: &ComputerId, browsers: Browsers, why: Why) -> Result<CheckpointReport> {
        let started = Instant::now();
        let c = self.inner.store.computer(computer.as_str()).await?;
        if c.home_volume.is_none() {
            return Err(EngineError::new(ErrorCode::NotFound, format!("computer {} has no workspace yet", c.name)));
        }
        let cref = c.cref();
        if self.inner.provider.status(&cref).await? != MachineStatus::Running {
            return Err(EngineError::new(ErrorCode::NotRunning, format!("computer {} is not running; its latest checkpoint is its workspace", c.name)));
        }
        let store = self.inner.data.home(&c.home_key);
        let handle = self.handle(&c.id);
        let _held = handle.home.lock().await;
        // Browsers run only on open desktops: with none open there is nothing to close (and no
        // exec to pay for).
        if browsers != Browsers::None {
            self.close_browsers(&c, browsers).await?;
        }
        let saving = |e: EngineError| e.context(format!("checkpointing computer {}", c.name));
        let s = store.clone();
        let (file_lock, previous) = blocking(move || {
            let file_lock = home_store::lock_store(&s)?;
            home_store::tidy(&s)?;
            let previous = match home_store::current_version(&s) {
                Some((n, root)) => Some(Previous { version: n, index: home_store::index_file(&s, n, &root)?, root }),
                None => None,
            };
            Ok((file_lock, previous))
        })
        .await
        .map_err(saving)?;
        let version = previous.as_ref().map_or(1, |p| p.version + 1);
        let to = NewVersion { partial: store.join(format!("v{version}.partial")), index: home_store::partial_index_path(&store, version) };
        let got = match self.receive_version(&cref, &store, previous, &to).await {
            Ok(got) => got,
            Err(e) => {
                let NewVersion { partial, index } = to;
                let _ = blocking(move || {
                    let _ = std::fs::remove_file(&index);
                    home_store::remove_tree(&partial)
                })
                .await;
                return Err(saving(e));
            }
        };
        let meta = Meta { version, at: self.now(), why, files: got.files, bytes: got.bytes, changed: got.changed.clone() };
        let keep = self.settings().map(|s| s.retention()).unwrap_or_else(|_| Settings::default().retention());
        let s = store.clone();
        blocking(move || {
            let done = home_store::commit(&s, &to.partial, &to.index, &meta, keep);
            drop(file_lock);
            done
        })
        .await
        .map_err(saving)?;
        // The replaced version goes after this returns (`Engine::settle` waits for it).
        self.inner.background.spawn(async move {
            if let Err(e) = blocking(move || home_store::sweep(&store)).await {
                tracing::warn!("removing a replaced checkpoint version: {e}");
            }
        });
        let report = CheckpointReport {
            version,
            files: got.files,
            bytes: got.bytes,
            copied: got.copied,
            millis: started.elapsed().as_millis() as u64,
            skipped: got.skipped,
            changed: got.changed,
        };
        tracing::info!(computer = %c.id, version, files = report.files, copied = report.copied, skipped = report.skipped.len(), ms = report.millis, "checkpoint");
        Ok(report)
    }

    /// Streams the computer's home into the new version `to`: the save request carries the
    /// previous version's index (so unchanged files are linked, not sent), and what comes back is
    /// bounded by the idle and total bounds and the person's margin of free disk. The caller
    /// removes what was received when this fails.
    async fn receive_version(&self, cref: &ComputerRef, store: &Path, previous: Option<Previous>, to: &NewVersion) -> Result<Received> {
        // The save request: its options, then the previous version's index, read from its file as
        // the computer takes it.
        let options = std::io::Cursor::new(home_store::save_options());
        let manifest: HomeIn = match &previous {
            Some(prev) => {
                let file = tokio::fs::File::open(&prev.index).await.map_err(|e| home_store::err("reading", &prev.index, e))?;
                Box::pin(options.chain(file))
            }
            None => Box::pin(options),
        };
        // The new version is linked from the previous one while the computer starts its walk.
        let (p, s) = (to.partial.clone(), store.to_path_buf());
        let prepared = blocking(move || {
            if let Err(e) = home_store::prepare(&p, previous.as_ref().map(Previous::paths)) {
                // An index that does not match its version (changed by hand) is not used again.
                if let Some(prev) = previous {
                    home_store::drop_index(&s, prev.version);
                }
                return Err(e);
            }
            Ok(previous)
        });
        let ctx = CallCtx::default();
        let (out, prepared) = tokio::join!(self.inner.provider.save_home(cref, manifest, &ctx), prepared);
        let (out, previous) = match (out, prepared) {
            (Ok(out), Ok(previous)) => (out, previous),
            (out, prepared) => return Err(prepared.err().unwrap_or_else(|| out.err().expect("one of them failed").into())),
        };
        let idle = Duration::from_millis(self.inner.policy.checkpoint_idle.max(1) as u64);
        let records = SyncIoBridge::new(Bounded::new(out.records, idle, TOTAL_BOUND));
        // The person's margin of free disk, looked at before and while the files come.
        let keep_free = u64::from(self.settings().map(|s| s.keep_free_gib).unwrap_or_else(|_| Settings::default().keep_free_gib)) << 30;
        let (store_dir, partial, index) = (store.to_path_buf(), to.partial.clone(), to.index.clone());
        let received = blocking(move || {
            let mut r = BufReader::with_capacity(256 * 1024, records);
            let mut at = String::new();
            home_store::receive_within(&mut r, &partial, previous.as_ref().map(Previous::paths), &index, &mut at, &|| {
                home_store::check_free(&store_dir, keep_free)
            })
        })
        .await;
        // The computer's own verdict counts too: a stream that ended well from a helper that failed
        // is not trusted, and a helper that failed says best why its stream broke off.
        let finished = match &received {
            // A helper the bot stopped after its last record never exits: the same idle bound.
            Ok(_) => match tokio::time::timeout(idle, out.finished).await {
                Ok(done) => done.map_err(EngineError::from),
                Err(_) => Err(EngineError::new(
                    ErrorCode::TimedOut,
                    format!("the computer stopped sending (its save helper did not finish after its last record within {} s)", idle.as_secs_f64()),
                )),
            },
            Err(e) if e.code != ErrorCode::Provider => Ok(()),
            Err(_) => match tokio::time::timeout(std::time::Duration::from_secs(5), out.finished).await {
                Ok(Err(e)) => Err(EngineError::from(e)),
                _ => Ok(()),
            },
        };
        // (A failure on this side, such as the store's disk, or a stall, stays the one reported.)
        match (received, finished) {
            (Err(e), Err(helper)) if e.code == ErrorCode::Provider => Err(helper),
            (received, finished) => received.and_then(|got| finished.map(|()| got)),
        }
    }

    /// Replaces a running computer's home with its latest checkpoint, through the computer (what a
    /// destroyed computer gets when it starts again; `cargo xtask bench` measures it). Work newer
    /// than that checkpoint is lost: take one first. None when there is no checkpoint.
    pub async fn restore_latest(&self, computer: &ComputerId) -> Result<Option<CheckpointReport>> {
        let c = self.inner.store.computer(computer.as_str()).await?;
        let cref = self.ensure_running(&c).await?;
        self.restore_into(&c, &cref).await
    }

    /// Puts the latest checkpoint of a computer's home back into its (new) home volume. None when
    /// there is no checkpoint.
    pub(crate) async fn restore_into(&self, c: &botdesk_store::Computer, cref: &ComputerRef) -> Result<Option<CheckpointReport>> {
        let started = Instant::now();
        let store = self.inner.data.home(&c.home_key);
        let handle = self.handle(&c.id);
        let _held = handle.home.lock().await;
        let s = store.clone();
        let Some((version, root)) = blocking(move || Ok(home_store::current_version(&s))).await? else { return Ok(None) };
        let summary = self.send_home(cref, Sending { root, sub: String::new(), keep: Box::new(everything), mode: LoadMode::Restore, for_bot: None }).await?;
        Ok(Some(CheckpointReport {
            version,
            files: summary.files,
            bytes: summary.bytes,
            copied: summary.files,
            millis: started.elapsed().as_millis() as u64,
            skipped: vec![],
            changed: Changed::default(),
        }))
    }

    /// Streams part of a stored version into a running computer.
    pub(crate) async fn send_home(&self, cref: &ComputerRef, s: Sending) -> Result<LoadSummary> {
        let (rx, tx) = tokio::io::duplex(256 * 1024);
        let writer = SyncIoBridge::new(tx);
        let mode = s.mode.clone();
        let computer = self.inner.store.computer(cref.id.as_str()).await?;
        // A load for a bot: its folder is made its own first (a bot arriving on a Team computer
        // is not on it yet), and a Private bot's load runs as that bot.
        let ctx = match &s.for_bot {
            Some(o) => {
                self.set_home_owners_with(&computer, cref, false, Some(o.clone())).await?;
                CallCtx::for_bot(&o.bot, BotUser::on(computer.scope, o.uid))
            }
            None => CallCtx::default(),
        };
        let arriving = s.for_bot.clone();
        let producer = blocking(move || {
            if home_store::find_dir(&s.root, &s.sub)? != home_store::Found::Folder {
                return Err(EngineError::new(ErrorCode::PathEscapes, format!("{} is not a folder in the checkpoint (a link or a file)", s.sub)));
            }
            let mut w = BufWriter::with_capacity(256 * 1024, writer);
            home_store::send_tree(&s.root, &s.sub, &s.keep, &mut w)?;
            // Dropping the writer closes the stream.
            Ok(())
        });
        let loaded = self.inner.provider.load_home(cref, &mode, Box::pin(rx), &ctx);
        let (produced, loaded) = tokio::join!(producer, loaded);
        // A producer that failed cut the stream short: the computer changed nothing, and the
        // producer's error is the one that says why.
        produced?;
        let loaded = loaded?;
        // What the load wrote as root goes to its owners: each bot's folder to its bot.
        self.set_home_owners_with(&computer, cref, true, arriving).await.map_err(|e| e.context("giving the restored files their owners"))?;
        Ok(loaded)
    }

    /// Closes browsers on the computer gracefully (CDP Browser.close, then signals), each as the
    /// bot of its display: only it may reach its browser (on a Team computer, a user of its own).
    pub(crate) async fn close_browsers(&self, c: &botdesk_store::Computer, browsers: Browsers) -> Result<()> {
        let cref = c.cref();
        for d in self.inner.store.desktops_on(&c.id).await? {
            let Some(bot) = &d.bot_id else { continue };
            if browsers == Browsers::OnDisplay(d.slot) || browsers == Browsers::All {
                let Ok(b) = self.inner.store.bot(bot.as_str()).await else { continue };
                let script = format!("botdesk-gateway close-browser {}; true", d.slot);
                let req = ExecRequest::new(["sh", "-c", script.as_str()]).cwd(WorkspacePath::root()).timeout(std::time::Duration::from_secs(30));
                if let Err(e) = self.inner.provider.exec(&cref, req, None, &crate::bot_ctx(&b, c)).await {
                    tracing::warn!("closing the browser of :{} before a checkpoint failed: {e}", d.slot);
                }
            }
        }
        // Their desktops' browsers start again on the next browser call.
        Ok(())
    }
}
