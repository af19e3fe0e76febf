//! The conformance suite against the real Docker engine, plus export → import across every
//! provider pairing.

mod common;
use botdesk_conformance::{conformance_suite, home_pairing, Target};
use botdesk_core::{ComputerId, ComputerScope, ComputerSpec, Resources};
use common::docker_target;
use std::sync::Arc;

conformance_suite!(docker_target());

async fn fake_target() -> Target {
    Target {
        provider: Arc::new(botdesk_fake::FakeProvider::new()),
        make_spec: Box::new(|name| ComputerSpec {
            id: ComputerId::new(name),
            name: name.into(),
            scope: ComputerScope::Team,
            home_volume: format!("fake-{name}"),
            resources: Resources::default(),
            host: botdesk_core::HostName::local(),
        }),
        guard: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pairing_fake_to_docker() {
    home_pairing(&fake_target().await, &docker_target().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pairing_docker_to_fake() {
    home_pairing(&docker_target().await, &fake_target().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pairing_docker_to_docker() {
    let t = docker_target().await;
    home_pairing(&t, &t).await;
}
