//! The engine's state machines as explicit enums with checked transitions. The store applies each
//! transition as a compare-and-swap in SQL; these tables say which ones exist.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a {what} cannot go from {from} to {to}")]
pub struct TransitionError {
    pub what: &'static str,
    pub from: &'static str,
    pub to: &'static str,
}

macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident => $text:literal),* $(,)? }) => {
        $(#[$m])*
        /// Stored and serialized as its text.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ts_rs::TS)]
        pub enum $name { $($(#[$vm])* #[serde(rename = $text)] $variant),* }
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),*];
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),* }
            }
            pub fn parse(s: &str) -> Option<Self> {
                match s { $($text => Some($name::$variant),)* _ => None }
            }
        }
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

string_enum!(
    /// queued → leased → running ⇄ waiting_takeover → completed | failed | cancelled
    RunStatus {
        Queued => "queued",
        Leased => "leased",
        Running => "running",
        WaitingTakeover => "waiting_takeover",
        Completed => "completed",
        Failed => "failed",
        Cancelled => "cancelled",
    }
);

impl RunStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
    pub fn can_become(self, to: Self) -> bool {
        use RunStatus::*;
        match self {
            Queued => matches!(to, Leased | Failed | Cancelled),
            Leased => matches!(to, Running | Failed | Cancelled),
            Running => matches!(to, WaitingTakeover | Completed | Failed | Cancelled),
            WaitingTakeover => matches!(to, Running | Failed | Cancelled),
            Completed | Failed | Cancelled => false,
        }
    }
    pub fn check(self, to: Self) -> Result<(), TransitionError> {
        if self.can_become(to) {
            Ok(())
        } else {
            Err(TransitionError { what: "run", from: self.as_str(), to: to.as_str() })
        }
    }
}

string_enum!(
    /// Why a run failed, for a front end or a script to branch on (the run's `error` says it in a
    /// sentence). Written as `MODEL_BAD_KEY` etc., like the engine's error codes.
    RunFailure {
        /// The model provider refused the API key.
        ModelBadKey => "MODEL_BAD_KEY",
        /// The provider does not know the model.
        ModelUnknown => "MODEL_UNKNOWN",
        /// The model cannot read images (screenshots).
        ModelNoImages => "MODEL_NO_IMAGES",
        /// The provider was overloaded, failing or unreachable after its retries.
        ModelUnavailable => "MODEL_UNAVAILABLE",
        /// The provider rejected a request or sent a reply that cannot be read.
        ModelError => "MODEL_ERROR",
        /// The model's real context window cannot hold one step (Ollama).
        ContextTooSmall => "CONTEXT_TOO_SMALL",
        /// The model declined to go on (Anthropic's `refusal`).
        ModelRefused => "MODEL_REFUSED",
        /// The conversation filled the model's context window (Anthropic's
        /// `model_context_window_exceeded`).
        ContextFull => "CONTEXT_FULL",
        /// The provider's content filter stopped the reply (OpenAI's `content_filter`).
        ContentFiltered => "CONTENT_FILTERED",
        /// The reply ended unfinished for a reason other than the output limit.
        ModelIncomplete => "MODEL_INCOMPLETE",
        /// The run reached its token or dollar budget.
        OverBudget => "OVER_BUDGET",
        /// The run reached its step limit without finishing.
        StepLimit => "STEP_LIMIT",
        /// The computer stopped under the run.
        ComputerStopped => "COMPUTER_STOPPED",
        /// The person declined what the run asked them (a safety check on the model's action).
        Declined => "DECLINED",
        /// The process driving the run died (its lease expired).
        Interrupted => "INTERRUPTED",
        /// The run could not start (no lease, no model, no computer).
        NotStarted => "NOT_STARTED",
    }
);

string_enum!(
    /// stopped | suspended | error → booting → running → suspending → suspended; running → stopped.
    ComputerState {
        Stopped => "stopped",
        Booting => "booting",
        Running => "running",
        Suspending => "suspending",
        Suspended => "suspended",
        Error => "error",
    }
);

impl ComputerState {
    pub fn can_become(self, to: Self) -> bool {
        use ComputerState::*;
        match self {
            Stopped | Suspended | Error => matches!(to, Booting),
            Booting => matches!(to, Running | Error | Stopped),
            Running => matches!(to, Suspending | Stopped | Error),
            Suspending => matches!(to, Suspended | Error | Running),
        }
    }
    pub fn check(self, to: Self) -> Result<(), TransitionError> {
        if self.can_become(to) {
            Ok(())
        } else {
            Err(TransitionError { what: "computer", from: self.as_str(), to: to.as_str() })
        }
    }
}

string_enum!(
    /// A display slot: assigned to a bot → releasing (its teardown running) → freed (the row goes),
    /// or failed (a teardown that failed keeps the slot reserved until it is verified gone).
    DesktopState {
        Assigned => "assigned",
        Releasing => "releasing",
        Failed => "failed",
    }
);

string_enum!(
    /// What a computer reservation is for.
    ReservationAction {
        Update => "update",
        Recover => "recover",
        Stop => "stop",
        IdleSuspend => "idle_suspend",
    }
);

string_enum!(
    /// Real lifecycle stages of a reservation's work, stored as they happen (never percentages).
    ReservationStage {
        Reserved => "reserved",
        Checkpointing => "checkpointing",
        ClosingBrowsers => "closing_browsers",
        Stopping => "stopping",
        Provisioning => "provisioning",
        Restoring => "restoring",
        Done => "done",
    }
);

string_enum!(
    /// `interrupted`: the worker stopped heartbeating; the reservation is kept until the owner
    /// releases the computer.
    ReservationStatus {
        Active => "active",
        Interrupted => "interrupted",
        Completed => "completed",
        Failed => "failed",
        Released => "released",
    }
);

string_enum!(
    /// Who wrote a chat message: the person (a task), the bot, or Botdesk (a note).
    MessageRole {
        User => "user",
        Assistant => "assistant",
        System => "system",
    }
);

string_enum!(
    /// A tool call in the chat: running, or done (`error` when the tool failed).
    CallStatus {
        Running => "running",
        Done => "done",
        Error => "error",
    }
);

string_enum!(
    /// An activity row (a command or a tool the person sees in the Terminal pane): `failed` is a
    /// command that exited non-zero, `error` one that could not run or a tool that failed.
    ActivityStatus {
        Running => "running",
        Done => "done",
        Failed => "failed",
        Error => "error",
    }
);

string_enum!(
    /// Which API a model is called through.
    ModelKind {
        Anthropic => "anthropic",
        OpenAi => "openai",
        /// Chat Completions of any compatible server (Ollama, vLLM, LM Studio, OpenRouter, xAI).
        OpenAiCompatible => "openai-compatible",
    }
);

string_enum!(
    /// How the person ended a takeover the bot asked for.
    TakeoverResult {
        Finished => "finished",
        Skipped => "skipped",
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    /// Every state reads back as written, and serializes (events, `--json`) as it is stored.
    fn reads_back_and_serializes_as_written<T: Copy + PartialEq + std::fmt::Debug + Serialize + serde::de::DeserializeOwned>(
        all: &[T],
        text: fn(T) -> &'static str,
        parse: fn(&str) -> Option<T>,
    ) {
        for &v in all {
            assert_eq!(parse(text(v)), Some(v));
            assert_eq!(serde_json::to_value(v).unwrap(), serde_json::json!(text(v)));
            assert_eq!(serde_json::from_value::<T>(serde_json::json!(text(v))).unwrap(), v);
        }
    }

    #[test]
    fn states_read_back_and_serialize_as_written() {
        reads_back_and_serializes_as_written(RunStatus::ALL, RunStatus::as_str, RunStatus::parse);
        reads_back_and_serializes_as_written(RunFailure::ALL, RunFailure::as_str, RunFailure::parse);
        reads_back_and_serializes_as_written(ComputerState::ALL, ComputerState::as_str, ComputerState::parse);
        reads_back_and_serializes_as_written(DesktopState::ALL, DesktopState::as_str, DesktopState::parse);
        reads_back_and_serializes_as_written(ReservationAction::ALL, ReservationAction::as_str, ReservationAction::parse);
        reads_back_and_serializes_as_written(ReservationStage::ALL, ReservationStage::as_str, ReservationStage::parse);
        reads_back_and_serializes_as_written(ReservationStatus::ALL, ReservationStatus::as_str, ReservationStatus::parse);
        reads_back_and_serializes_as_written(TakeoverResult::ALL, TakeoverResult::as_str, TakeoverResult::parse);
        reads_back_and_serializes_as_written(MessageRole::ALL, MessageRole::as_str, MessageRole::parse);
        reads_back_and_serializes_as_written(CallStatus::ALL, CallStatus::as_str, CallStatus::parse);
        reads_back_and_serializes_as_written(ActivityStatus::ALL, ActivityStatus::as_str, ActivityStatus::parse);
        reads_back_and_serializes_as_written(ModelKind::ALL, ModelKind::as_str, ModelKind::parse);
        assert_eq!(RunFailure::parse("model_bad_key"), None);
    }

    #[test]
    fn run_transitions_are_exactly_the_designed_ones() {
        use RunStatus::*;
        let allowed = [
            (Queued, Leased),
            (Queued, Failed),
            (Queued, Cancelled),
            (Leased, Running),
            (Leased, Failed),
            (Leased, Cancelled),
            (Running, WaitingTakeover),
            (Running, Completed),
            (Running, Failed),
            (Running, Cancelled),
            (WaitingTakeover, Running),
            (WaitingTakeover, Failed),
            (WaitingTakeover, Cancelled),
        ];
        for &a in RunStatus::ALL {
            for &b in RunStatus::ALL {
                assert_eq!(a.can_become(b), allowed.contains(&(a, b)), "{a} -> {b}");
            }
        }
        assert_eq!(Completed.check(Running).unwrap_err().to_string(), "a run cannot go from completed to running");
    }

    #[test]
    fn computer_transitions() {
        use ComputerState::*;
        assert!(Stopped.can_become(Booting) && Suspended.can_become(Booting) && Error.can_become(Booting));
        assert!(Booting.can_become(Running) && Running.can_become(Suspending) && Suspending.can_become(Suspended));
        assert!(!Stopped.can_become(Running) && !Suspended.can_become(Suspending) && !Running.can_become(Booting));
        assert_eq!(Stopped.check(Suspended).unwrap_err().to_string(), "a computer cannot go from stopped to suspended");
    }

    #[test]
    fn names_round_trip() {
        for s in RunStatus::ALL {
            assert_eq!(RunStatus::parse(s.as_str()), Some(*s));
        }
        for s in ComputerState::ALL {
            assert_eq!(ComputerState::parse(s.as_str()), Some(*s));
        }
    }
}
