use crate::path::PathError;

/// Errors of every provider. `code()` is what a front end branches on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ComputerError {
    #[error(transparent)]
    Path(#[from] PathError),
    #[error("{path} is {size} bytes, over the limit of {max} bytes")]
    TooLarge { path: String, size: u64, max: u64 },
    #[error("{0} does not exist in the computer workspace")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    /// The backend (e.g. the Docker engine) cannot be reached; the message says how to fix it.
    #[error("{0}")]
    Unavailable(String),
    #[error("computer {0} is not running")]
    NotRunning(String),
    #[error("{operation} is not available on the {provider} provider")]
    Unsupported { provider: &'static str, operation: &'static str },
    #[error("{0}")]
    Provider(String),
    /// The computer did not answer within the call's time bound (the message names the call).
    #[error("{0}")]
    TimedOut(String),
    #[error("injected failure in {0}")]
    Injected(&'static str),
}
