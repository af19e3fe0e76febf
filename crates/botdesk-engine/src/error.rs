use botdesk_core::ComputerError;
use botdesk_store::StoreError;
use serde::Serialize;

/// What a front end may branch on. Everything else is in the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    NotFound,
    Conflict,
    Invalid,
    PathEscapes,
    TooLarge,
    DockerUnavailable,
    NotRunning,
    Busy,
    /// Take control was refused because a run holds the bot ("Stop the bot first").
    BotRunning,
    /// Beyond `SANDBOX_TEAM_SCREEN_LIMIT`: graphical tools refuse, shell and files keep working.
    MultiScreenUnavailable,
    /// The caller's lease or view is out of date (older fence, expired lease).
    Stale,
    Provider,
    /// The computer stopped answering within the call's time bound.
    TimedOut,
    /// This machine's disk would fill past the person's margin: a checkpoint stopped and kept
    /// the version before.
    DiskFull,
    /// No Secret Service answers and the key vault's passphrase has not been given
    /// ([`crate::Engine::unlock_keys`]), or it was wrong.
    KeysLocked,
    Internal,
}

/// An engine error: a code and one clear sentence (with context) for a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error, ts_rs::TS)]
#[error("{message}")]
pub struct EngineError {
    pub code: ErrorCode,
    pub message: String,
}

impl EngineError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Invalid, message)
    }
    /// Prefixes what the engine was doing.
    pub fn context(mut self, doing: impl std::fmt::Display) -> Self {
        self.message = format!("{doing}: {}", self.message);
        self
    }
}

impl From<ComputerError> for EngineError {
    fn from(e: ComputerError) -> Self {
        let code = match &e {
            ComputerError::Path(_) => ErrorCode::PathEscapes,
            ComputerError::TooLarge { .. } => ErrorCode::TooLarge,
            ComputerError::NotFound(_) => ErrorCode::NotFound,
            ComputerError::Invalid(_) => ErrorCode::Invalid,
            ComputerError::Unavailable(_) => ErrorCode::DockerUnavailable,
            ComputerError::NotRunning(_) => ErrorCode::NotRunning,
            ComputerError::Unsupported { .. } => ErrorCode::Invalid,
            ComputerError::Provider(_) | ComputerError::Injected(_) => ErrorCode::Provider,
            ComputerError::TimedOut(_) => ErrorCode::TimedOut,
        };
        Self::new(code, e.to_string())
    }
}

impl From<StoreError> for EngineError {
    fn from(e: StoreError) -> Self {
        let code = match &e {
            StoreError::NotFound(_) => ErrorCode::NotFound,
            StoreError::Conflict(_) => ErrorCode::Conflict,
            StoreError::BotRunning(_) => ErrorCode::BotRunning,
            StoreError::ScreenLimit(_) => ErrorCode::MultiScreenUnavailable,
            StoreError::Busy(_) => ErrorCode::Busy,
            StoreError::Stale(_) => ErrorCode::Stale,
            _ => ErrorCode::Internal,
        };
        Self::new(code, e.to_string())
    }
}

impl From<botdesk_core::PathError> for EngineError {
    fn from(e: botdesk_core::PathError) -> Self {
        ComputerError::from(e).into()
    }
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// Runs file or keyring work off the async runtime; a task that panicked is an internal error.
pub(crate) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f).await.map_err(|e| EngineError::new(ErrorCode::Internal, format!("a background task failed: {e}")))?
}
