//! Screen recordings of runs. While a run works (and while the person holds its screen in the
//! middle of it) the computer records the bot's display: ffmpeg as the screen services, a few
//! frames a second, H.264 (the provider's `start_recording`). When the run ends the engine takes
//! the file into `DATA_DIR/recordings/<run>/screen.mkv`, beside `recording.json` (when it started
//! and ended, its size, whether it reached its cap). Recordings are bounded per run (the
//! provider's recorder stops at the cap) and removed `record_days` after their run ended (checked
//! when a run ends and, at most hourly, when an engine starts), the oldest first over a total cap.
//! Nothing here fails a run: a recording that cannot start or be taken is logged and left out.

use std::path::{Path, PathBuf};
use std::time::Duration;

use botdesk_core::{ComputerRef, RecordingSpec};
use serde::{Deserialize, Serialize};

use crate::error::blocking;
use crate::{Engine, EngineError, ErrorCode, Result};

/// The file and its description, in a run's folder.
pub const VIDEO: &str = "screen.mkv";
pub const META: &str = "recording.json";

/// How long taking a recording out of the computer may last.
const TAKE_BOUND: Duration = Duration::from_secs(300);

/// What is known of a run's recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct RecordingMeta {
    pub run_id: String,
    /// When the first frame was taken, and when the recording ended (ms since the epoch).
    pub started_at: i64,
    pub ended_at: i64,
    pub bytes: u64,
    pub fps: u32,
    /// The recording reached the run's cap: what came after is not in it.
    pub capped: bool,
}

impl RecordingMeta {
    pub fn duration_ms(&self) -> i64 {
        (self.ended_at - self.started_at).max(0)
    }
}

/// A run's recorder: started once the bot's display is up, taken when the run ends.
pub(crate) struct Recorder {
    engine: Engine,
    run_id: String,
    bot: botdesk_store::Bot,
    /// What to record, from the settings; `on` is the setting's switch (a recorder left going
    /// is taken even when recording was turned off since).
    spec: RecordingSpec,
    on: bool,
    state: tokio::sync::Mutex<State>,
}

#[derive(Default)]
enum State {
    #[default]
    NotYet,
    /// Recording display `slot`.
    On { cref: ComputerRef, slot: u32 },
    /// It could not start: not tried again in this run.
    Failed,
}

impl Recorder {
    pub(crate) fn new(engine: &Engine, bot: &botdesk_store::Bot, run_id: &str) -> Recorder {
        let s = engine.settings().unwrap_or_default();
        let spec = RecordingSpec { key: run_id.to_string(), fps: s.record_fps, max_bytes: u64::from(s.record_max_mib) << 20 };
        Recorder { engine: engine.clone(), run_id: run_id.to_string(), bot: bot.clone(), spec, on: s.record_screen, state: Default::default() }
    }

    /// Starts recording if the bot's display is up and recording is not on yet (cheap once on).
    pub(crate) async fn ensure(&self) {
        if !self.on {
            return;
        }
        let spec = &self.spec;
        let mut state = self.state.lock().await;
        if !matches!(*state, State::NotYet) {
            return;
        }
        let e = &self.engine;
        let Ok(Some(d)) = e.inner.store.desktop_of(&self.bot.computer_id, &self.bot.id).await else { return };
        let Ok(cref) = e.cref_of(&self.bot.computer_id).await else { return };
        *state = match e.inner.provider.start_recording(&cref, d.slot, spec).await {
            Ok(()) => State::On { cref, slot: d.slot },
            Err(err) => {
                tracing::warn!(run = %self.run_id, "the screen is not recorded: {err}");
                State::Failed
            }
        };
    }

    /// Ends the recording and keeps it in the data directory (nothing when none was made).
    pub(crate) async fn finish(&self) {
        let State::On { cref, slot } = std::mem::take(&mut *self.state.lock().await) else { return };
        match tokio::time::timeout(TAKE_BOUND, self.take(&cref, slot, &self.spec)).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) if err.code == ErrorCode::NotFound => tracing::debug!(run = %self.run_id, "no recording to keep: {err}"),
            Ok(Err(err)) => tracing::warn!(run = %self.run_id, "the run's recording could not be kept: {err}"),
            Err(_) => tracing::warn!(run = %self.run_id, "taking the run's recording took over {} s; left out", TAKE_BOUND.as_secs()),
        }
        if let Err(err) = self.engine.prune_recordings().await {
            tracing::warn!("removing old recordings: {err}");
        }
    }

    async fn take(&self, cref: &ComputerRef, slot: u32, spec: &RecordingSpec) -> Result<()> {
        use tokio::io::AsyncWriteExt;
        let mut taken = self.engine.inner.provider.take_recording(cref, slot, &spec.key).await?;
        let ended_at = self.engine.now();
        let dir = self.engine.data_dir().recording(&self.run_id);
        let io = |e: std::io::Error| EngineError::new(ErrorCode::Internal, format!("writing the recording into {}: {e}", dir.display()));
        tokio::fs::create_dir_all(&dir).await.map_err(io)?;
        let part = dir.join(format!("{VIDEO}.part"));
        let mut file = tokio::fs::File::create(&part).await.map_err(io)?;
        // The computer said its size; no more than that (and the cap) is read.
        let most = taken.bytes.min(spec.max_bytes + (1 << 20));
        let copied = tokio::io::copy(&mut tokio::io::AsyncReadExt::take(&mut taken.data, most), &mut file).await.map_err(io)?;
        file.flush().await.map_err(io)?;
        file.sync_all().await.map_err(io)?;
        drop(file);
        tokio::fs::rename(&part, dir.join(VIDEO)).await.map_err(io)?;
        let meta = RecordingMeta {
            run_id: self.run_id.clone(),
            started_at: taken.started_ms,
            ended_at: ended_at.max(taken.started_ms),
            bytes: copied,
            fps: spec.fps,
            // ffmpeg stops within a few frames of its cap.
            capped: copied + (256 << 10) >= spec.max_bytes,
        };
        tokio::fs::write(dir.join(META), serde_json::to_vec_pretty(&meta).expect("a recording's description serialises")).await.map_err(io)
    }
}

impl Engine {
    /// Ends the recorder a run whose driver died left going, and keeps what it recorded
    /// (nothing when the run's bot has no display or no recording is going on).
    pub(crate) async fn keep_left_recording(&self, run: &botdesk_store::Run) {
        let Ok(bot) = self.inner.store.bot(run.bot_id.as_str()).await else { return };
        let Ok(Some(d)) = self.inner.store.desktop_of(&run.computer_id, &run.bot_id).await else { return };
        let Ok(cref) = self.cref_of(&run.computer_id).await else { return };
        let r = Recorder::new(self, &bot, &run.id);
        *r.state.lock().await = State::On { cref, slot: d.slot };
        r.finish().await;
    }
}

/// A run's recording in `dir`, if it has one.
fn read_meta(dir: &Path) -> Option<RecordingMeta> {
    let meta: RecordingMeta = serde_json::from_slice(&std::fs::read(dir.join(META)).ok()?).ok()?;
    dir.join(VIDEO).is_file().then_some(meta)
}

impl Engine {
    /// The recording of a run, and the path of its video; None when it has none.
    pub fn recording(&self, run_id: &str) -> Option<(RecordingMeta, PathBuf)> {
        if !RecordingSpec::plain_key(run_id) {
            return None;
        }
        let dir = self.data_dir().recording(run_id);
        read_meta(&dir).map(|m| (m, dir.join(VIDEO)))
    }

    /// [`Self::prune_recordings`] at most once an hour (a stamp file's age says when it last
    /// ran): every engine start calls it, so old recordings go on a machine where no run ends.
    pub(crate) async fn prune_recordings_if_due(&self) {
        let stamp = self.data_dir().recordings().join(".pruned");
        let due = match std::fs::metadata(&stamp).and_then(|m| m.modified()) {
            Ok(t) => t.elapsed().map_or(true, |age| age > Duration::from_secs(3600)),
            Err(_) => self.data_dir().recordings().is_dir(),
        };
        if !due {
            return;
        }
        match self.prune_recordings().await {
            Ok(_) => {
                let _ = std::fs::write(&stamp, b"");
            }
            Err(e) => tracing::warn!("removing old recordings: {e}"),
        }
    }

    /// Removes the recordings whose run ended more than `record_days` ago (by the engine's
    /// clock) and what a recording that was never finished left; then, while all of them take
    /// more than `record_total_gib`, the oldest. Returns how many went.
    pub async fn prune_recordings(&self) -> Result<usize> {
        let s = self.settings()?;
        let oldest = self.now() - i64::from(s.record_days) * 24 * 3600 * 1000;
        let total_cap = u64::from(s.record_total_gib) << 30;
        let root = self.data_dir().recordings();
        blocking(move || {
            let Ok(entries) = std::fs::read_dir(&root) else { return Ok(0) };
            let mut removed = 0;
            let mut kept = vec![];
            for e in entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())) {
                let dir = e.path();
                let meta = read_meta(&dir);
                let old = match &meta {
                    Some(m) => m.ended_at < oldest,
                    // Unfinished (the process ended while taking it): gone once old by its mtime.
                    None => e
                        .metadata()
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                        .is_some_and(|t| (t.as_millis() as i64) < oldest),
                };
                if old {
                    removed += usize::from(std::fs::remove_dir_all(&dir).is_ok());
                } else if let Some(m) = meta {
                    let size = std::fs::metadata(dir.join(VIDEO)).map_or(0, |f| f.len());
                    kept.push((m.ended_at, size, dir));
                }
            }
            kept.sort();
            let mut total: u64 = kept.iter().map(|k| k.1).sum();
            for (_, size, dir) in kept {
                if total <= total_cap {
                    break;
                }
                if std::fs::remove_dir_all(&dir).is_ok() {
                    total -= size;
                    removed += 1;
                }
            }
            Ok(removed)
        })
        .await
    }
}
