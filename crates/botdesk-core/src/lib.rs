//! Botdesk's domain: identifiers, the [`ComputerProvider`] contract every computer backend implements,
//! the workspace path rules every path entry point goes through, and secret redaction.
//!
//! This crate opens no file, connection or process (the gateway protocol's `present` speaks over a
//! stream its caller opened). Providers (`botdesk-docker`, `botdesk-fake`) implement the trait; the engine
//! is the only caller.

pub mod action;
pub mod approvals;
pub mod browser;
pub mod civil;
pub mod error;
pub mod gateway;
pub mod home_stream;
pub mod login;
pub mod machine;
pub mod models;
pub mod network;
pub mod path;
pub mod provider;
pub mod redact;
pub mod screenshot;
pub mod state;
pub mod types;

pub use approvals::{ApprovalKind, Approvals, PendingApproval, Verdict};
pub use error::ComputerError;
pub use network::{BotNetwork, NetPolicy, NetRefusal, NetRefusals, NetTarget};
pub use path::{resolve_for_bot, PathError, WorkspacePath, HOME};
pub use provider::*;
pub use redact::Redactor;
pub use state::*;
pub use types::*;
