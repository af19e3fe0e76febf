//! A run's trajectory: its steps in order (the task, the model's words, each tool call with its
//! arguments, result and screenshot, the notes the person and Botdesk added), for
//! `botdesk replay --out FILE.json` and for tools that read runs (docs/trajectory.md). Its text
//! is the chat's, redacted as stored; its screenshots are the ones the model was given.

use super::*;

/// The `format` of a trajectory; a reader checks it before anything else.
pub const TRAJECTORY_FORMAT: &str = "botdesk-trajectory/1";

/// The most messages of a bot read to find a run's (a run of a very long chat further back is
/// found by its id only among these).
const MAX_MESSAGES: i64 = 100_000;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trajectory {
    pub format: &'static str,
    pub bot: TrajectoryBot,
    pub run: RunSummary,
    /// The run's screen recording, when it has one (the video stays in the data directory).
    pub recording: Option<crate::RecordingMeta>,
    pub steps: Vec<TrajectoryStep>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrajectoryBot {
    pub id: String,
    pub name: String,
}

/// One step; `at` is when its message was stored (ms since the epoch).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TrajectoryStep {
    /// What the person asked.
    Task { at: i64, text: String },
    /// The model's words.
    Message { at: i64, text: String },
    /// A tool call: its arguments as the model sent them (JSON, or the raw text when they were not
    /// JSON), its result, and the screenshot it returned (a PNG, relative to the data directory in
    /// the engine's answer; `botdesk replay` copies it beside the file and names it from there).
    Tool {
        at: i64,
        id: String,
        tool: String,
        arguments: serde_json::Value,
        status: CallStatus,
        result: Option<String>,
        screenshot: Option<String>,
        attachment: Option<String>,
        /// Where its actions landed on the screen (pixels) and when, for calls that acted there.
        acted: Option<crate::replay::Acted>,
    },
    /// Something Botdesk or the person said in the run: a pause and handback, a failure.
    /// `event` is `takeover` when the person's turn on the screen began (the bot asked, or the
    /// run paused for them) and `handback` when they gave it back.
    Note { at: i64, text: String, event: Option<NoteEvent> },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NoteEvent {
    Takeover,
    Handback,
    /// The bot's network policy refused a connection (the note is the refusal's line).
    Network,
    /// The person was asked about something the bot's approvals name (the note says what, and
    /// the answer).
    Approval,
}

impl TrajectoryStep {
    /// When it happened (ms since the epoch; a tool call: when the model's message came).
    pub fn at(&self) -> i64 {
        match self {
            TrajectoryStep::Task { at, .. } | TrajectoryStep::Message { at, .. } | TrajectoryStep::Tool { at, .. } | TrajectoryStep::Note { at, .. } => *at,
        }
    }
}

fn event_of(note: &str) -> Option<NoteEvent> {
    use super::takeover::{NEEDS_YOU, PAUSED, RESUMED};
    if note.starts_with(NEEDS_YOU) || note == PAUSED {
        Some(NoteEvent::Takeover)
    } else if note.starts_with(RESUMED) {
        Some(NoteEvent::Handback)
    } else {
        None
    }
}

impl Engine {
    /// The trajectory of one of a bot's runs (`run`: its id; None: the latest).
    pub async fn trajectory(&self, bot: &crate::BotRef, run: Option<&str>) -> Result<Trajectory> {
        let b = self.inner.store.bot(bot.id.as_str()).await?;
        let summary = self.summaries(&bot.id, run, 1).await?.into_iter().next();
        let summary = summary.ok_or_else(|| {
            let which = run.map_or("runs yet".to_string(), |id| format!("run {id:?} (botdesk runs {} lists them)", b.name));
            EngineError::new(ErrorCode::NotFound, format!("{} has no {which}", b.name))
        })?;
        let mut steps = vec![];
        for item in self.chat(bot, MAX_MESSAGES).await?.into_iter().filter(|i| i.run_id == summary.id) {
            let at = item.created_at;
            match item.role {
                MessageRole::User => steps.push(TrajectoryStep::Task { at, text: item.text }),
                MessageRole::Assistant if !item.text.trim().is_empty() => steps.push(TrajectoryStep::Message { at, text: item.text }),
                MessageRole::Assistant => {}
                _ => steps.push(TrajectoryStep::Note { at, event: event_of(&item.text), text: item.text }),
            }
            for c in item.calls {
                let arguments = serde_json::from_str(&c.arguments).unwrap_or(serde_json::Value::String(c.arguments));
                steps.push(TrajectoryStep::Tool {
                    at,
                    id: c.id,
                    tool: c.name,
                    arguments,
                    status: c.status,
                    result: c.text,
                    screenshot: c.image,
                    attachment: c.attachment,
                    acted: c.acted,
                });
            }
        }
        // What the network policy refused during the run, at the time it did.
        for r in self.inner.store.run_activity(&summary.id, crate::NETWORK_ACTIVITY).await? {
            steps.push(TrajectoryStep::Note { at: r.created_at, text: r.target, event: Some(NoteEvent::Network) });
        }
        // What the person was asked and answered, at the time they answered.
        for r in self.inner.store.run_activity(&summary.id, crate::APPROVAL_ACTIVITY).await? {
            steps.push(TrajectoryStep::Note { at: r.created_at, text: r.target, event: Some(NoteEvent::Approval) });
        }
        steps.sort_by_key(TrajectoryStep::at);
        let recording = self.recording(&summary.id).map(|(m, _)| m);
        Ok(Trajectory { format: TRAJECTORY_FORMAT, bot: TrajectoryBot { id: b.id.to_string(), name: b.name }, run: summary, recording, steps })
    }
}
