//! The Docker [`ComputerProvider`]: one labelled container per computer, its home a labelled Docker
//! volume (streamed out and in for checkpoints, never mounted on the host), exec through the Docker API, files through `botdesk-helper` inside the
//! computer (so a path is always judged where the bot sees it). Also builds the computer image.

mod computers;
pub mod desktop;
mod files;
mod gateway;
mod home;
pub mod image;
mod machine;
mod network;
mod provider;
mod relay;
pub mod remote;
mod route;
pub mod spec;

pub use machine::machine;
pub use provider::{DockerConfig, DockerProvider};

/// Turns a bollard error into the provider's error, recognising an unreachable engine.
pub(crate) fn docker_err(e: bollard::errors::Error) -> botdesk_core::ComputerError {
    use bollard::errors::Error as E;
    match &e {
        E::HyperResponseError { .. } | E::IOError { .. } | E::HyperLegacyError { .. } | E::SocketNotFoundError(_) => {
            botdesk_core::ComputerError::Unavailable(unreachable_message(&e.to_string()))
        }
        E::DockerResponseServerError { status_code: 404, message } => botdesk_core::ComputerError::NotFound(message.clone()),
        _ => botdesk_core::ComputerError::Provider(format!("Docker: {e}")),
    }
}

/// The one line every front end prints when the engine cannot be reached: what failed and how to fix it.
pub fn unreachable_message(detail: &str) -> String {
    let host = std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into());
    format!(
        "Docker is not reachable at {host} ({detail}). Start the Docker engine (`sudo systemctl start docker`, or `sudo dockerd &`), \
         or run `cargo xtask run`, which starts it for you."
    )
}
