//! The conformance suite against a Docker engine on another machine (the second engine `cargo
//! xtask test` starts in a network namespace of its own, reached over TCP with mutual TLS), and a
//! workspace carried between it and this machine's engine.

mod common;
use botdesk_conformance::{conformance_suite, home_pairing};
use common::{docker_target, remote_target};

conformance_suite!(remote_target());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pairing_local_to_remote() {
    home_pairing(&docker_target().await, &remote_target().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pairing_remote_to_local() {
    home_pairing(&remote_target().await, &docker_target().await).await;
}
