//! The agent runtime: model clients for two wire formats, the tools a bot sees, and the run loop.
//! It knows neither Tauri nor Docker: the engine implements [`run::Host`] to carry tools out.

mod anthropic;
pub mod client;
pub mod conversation;
mod model;
pub mod ollama;
mod openai;
mod pace;
mod responses;
pub mod run;
pub mod scripted;
mod sse;
pub mod tools;
pub mod uitars;

pub use client::{Listener, ModelClient};
pub use conversation::{Image, Message, ToolCall, ToolResult};
pub use model::{key_may_go_to, ClaudeTool, Dialect, ModelConfig, ModelError, OpenAiTool, Request, Retry, ToolChoice, Wire};
pub use run::{run, system_prompt, Host, RunConfig, RunEnd, ToolOutput};
pub use tools::Tool;
