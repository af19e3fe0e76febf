//! What a replay draws: each screen action of a run as a mark at the screen pixel where it
//! happened (a click ring, a drag path, typed text, keys), stored with the tool call that did it.

use botdesk_core::action::{Action, Button, Direction};
use serde::{Deserialize, Serialize};

/// One action, as a replay draws it; coordinates are pixels of the screen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Mark {
    Click {
        x: u32,
        y: u32,
        button: String,
    },
    /// The pointer moved (or a button was pressed or let go) here.
    Move {
        x: u32,
        y: u32,
    },
    Drag {
        x: u32,
        y: u32,
        to_x: u32,
        to_y: u32,
    },
    Type {
        text: String,
    },
    /// Keys pressed together, as the model named them ("ctrl+l"); `held` for a key held down.
    Key {
        keys: String,
        held: bool,
    },
    Scroll {
        x: Option<u32>,
        y: Option<u32>,
        direction: String,
        amount: u32,
    },
}

/// What a tool call did on the screen, and when (ms since the epoch).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct Acted {
    pub at: i64,
    pub marks: Vec<Mark>,
}

fn button(b: Button) -> String {
    serde_json::to_value(b).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_else(|| "left".into())
}

fn direction(d: Direction) -> String {
    serde_json::to_value(d).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

/// The marks of a checked batch (pixels of the screen); `redact` is applied to typed text.
pub(crate) fn marks_of(batch: &[Action], redact: impl Fn(&str) -> String) -> Vec<Mark> {
    batch
        .iter()
        .filter_map(|a| match a {
            Action::Click { x, y, button: b } => Some(Mark::Click { x: *x, y: *y, button: button(*b) }),
            Action::Move { x, y } => Some(Mark::Move { x: *x, y: *y }),
            Action::Down { at: Some((x, y)), .. } | Action::Up { at: Some((x, y)), .. } => Some(Mark::Move { x: *x, y: *y }),
            Action::Down { at: None, .. } | Action::Up { at: None, .. } | Action::Wait { .. } | Action::KeyUp { .. } => None,
            Action::Drag { x, y, to_x, to_y, .. } => Some(Mark::Drag { x: *x, y: *y, to_x: *to_x, to_y: *to_y }),
            Action::Type { text } => Some(Mark::Type { text: redact(text) }),
            Action::Key { key, modifiers } => {
                let mut keys = modifiers.clone();
                keys.push(key.clone());
                Some(Mark::Key { keys: keys.join("+"), held: false })
            }
            Action::KeyDown { key } => Some(Mark::Key { keys: key.clone(), held: true }),
            Action::Scroll { at, direction: d, amount } => {
                Some(Mark::Scroll { x: at.map(|p| p.0), y: at.map(|p| p.1), direction: direction(*d), amount: *amount })
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_becomes_marks_with_typed_secrets_redacted() {
        let batch = vec![
            Action::Click { x: 10, y: 20, button: Button::Left },
            Action::Type { text: "hunter2 and more".into() },
            Action::Key { key: "l".into(), modifiers: vec!["ctrl".into()] },
            Action::Wait { ms: 5 },
            Action::Drag { x: 1, y: 2, to_x: 3, to_y: 4, button: Button::Left },
        ];
        let marks = marks_of(&batch, |t| t.replace("hunter2", "[redacted]"));
        assert_eq!(
            marks,
            [
                Mark::Click { x: 10, y: 20, button: "left".into() },
                Mark::Type { text: "[redacted] and more".into() },
                Mark::Key { keys: "ctrl+l".into(), held: false },
                Mark::Drag { x: 1, y: 2, to_x: 3, to_y: 4 },
            ]
        );
    }
}

/// One run as the app's replay shows it: its steps on its timeline, and its recording.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
pub struct ReplayView {
    pub bot: String,
    pub run: crate::RunSummary,
    /// None: the run has no recording; the player shows the model's frames.
    pub recording: Option<crate::RecordingMeta>,
    pub steps: Vec<ReplayStep>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum ReplayKind {
    Task,
    Message,
    Tool,
    Note,
    /// The person's turn on the screen began…
    Takeover,
    /// …and ended.
    Handback,
    /// The bot's network policy refused a connection.
    Network,
    /// The person answered what the bot's approvals asked about.
    Approval,
}

/// A step: when (ms since the epoch; for a screen action, when it acted), what, and its frame.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
pub struct ReplayStep {
    pub at: i64,
    pub kind: ReplayKind,
    /// The tool's name, or what kind of step it is.
    pub title: String,
    pub text: String,
    /// The screenshot the model received (`shots/…`, for `shot`).
    pub image: Option<String>,
    pub acted: Option<Acted>,
}

/// Frames given at once, and their size.
pub const MAX_FRAMES: u32 = 64;
const FRAME_WIDTH: u32 = 960;

impl crate::Engine {
    /// One of a bot's runs for the app's replay (`run`: its id; None: the latest).
    pub async fn replay_view(&self, bot: &crate::BotRef, run: Option<&str>) -> crate::Result<ReplayView> {
        use crate::runs::{NoteEvent, TrajectoryStep as S};
        let t = self.trajectory(bot, run).await?;
        let steps = t
            .steps
            .into_iter()
            .map(|s| match s {
                S::Task { at, text } => ReplayStep { at, kind: ReplayKind::Task, title: "Task".into(), text, image: None, acted: None },
                S::Message { at, text } => ReplayStep { at, kind: ReplayKind::Message, title: "Said".into(), text, image: None, acted: None },
                S::Note { at, text, event } => {
                    let kind = match event {
                        Some(NoteEvent::Takeover) => ReplayKind::Takeover,
                        Some(NoteEvent::Handback) => ReplayKind::Handback,
                        Some(NoteEvent::Network) => ReplayKind::Network,
                        Some(NoteEvent::Approval) => ReplayKind::Approval,
                        None => ReplayKind::Note,
                    };
                    let title = match kind {
                        ReplayKind::Network => "Network policy",
                        ReplayKind::Approval => "Approval",
                        _ => "Note",
                    };
                    ReplayStep { at, kind, title: title.into(), text, image: None, acted: None }
                }
                S::Tool { at, tool, arguments, result, screenshot, acted, .. } => {
                    let args = match arguments {
                        serde_json::Value::String(raw) => raw,
                        v => v.to_string(),
                    };
                    let text = match result {
                        Some(r) => format!("{args}\n{r}"),
                        None => args,
                    };
                    ReplayStep { at: acted.as_ref().map_or(at, |a| a.at), kind: ReplayKind::Tool, title: tool, text, image: screenshot, acted }
                }
            })
            .collect();
        Ok(ReplayView { bot: t.bot.name, run: t.run, recording: t.recording, steps })
    }

    /// Frames of a run's recording from `from_ms` after its first (`count`, at most
    /// [`MAX_FRAMES`], one each 1/fps s), as JPEG, 960 pixels wide: decoded here by ffmpeg, so
    /// they need neither the computer nor Docker.
    pub async fn replay_frames(&self, run: &str, from_ms: i64, count: u32) -> crate::Result<Vec<Vec<u8>>> {
        use crate::{EngineError, ErrorCode};
        let (_, video) = self.recording(run).ok_or_else(|| EngineError::new(ErrorCode::NotFound, format!("run {run} has no screen recording")))?;
        let count = count.clamp(1, MAX_FRAMES);
        let from = format!("{:.3}", from_ms.max(0) as f64 / 1000.0);
        let mut args: Vec<String> = ["-nostdin", "-loglevel", "error", "-ss", &from, "-i"].map(String::from).to_vec();
        args.push(video.display().to_string());
        let scale = format!("scale={FRAME_WIDTH}:-2");
        args.extend(["-frames:v", &count.to_string(), "-vf", &scale, "-c:v", "mjpeg", "-q:v", "5", "-f", "image2pipe", "pipe:1"].map(String::from));
        let out = crate::export::ffmpeg(&args, std::time::Duration::from_secs(30), "playing the recording").await?;
        Ok(jpegs(&out))
    }
}

/// The JPEGs of an MJPEG stream: each from its start marker to its end marker (inside a JPEG's
/// data a 0xFF byte is always followed by 0x00, so an end marker is an end).
fn jpegs(stream: &[u8]) -> Vec<Vec<u8>> {
    let mut out = vec![];
    let mut start = None;
    let mut i = 0;
    while i + 1 < stream.len() {
        match (stream[i], stream[i + 1]) {
            (0xFF, 0xD8) if start.is_none() => start = Some(i),
            (0xFF, 0xD9) => {
                if let Some(s) = start.take() {
                    out.push(stream[s..i + 2].to_vec());
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod jpeg_tests {
    #[test]
    fn an_mjpeg_stream_splits_into_its_frames() {
        let a = [0xFF, 0xD8, 1, 0xFF, 0x00, 2, 0xFF, 0xD9];
        let b = [0xFF, 0xD8, 3, 0xFF, 0xD9];
        let stream = [&a[..], &b[..], &[0xFF, 0xD8, 9][..]].concat();
        assert_eq!(super::jpegs(&stream), vec![a.to_vec(), b.to_vec()], "a cut-off frame is left out");
    }
}
