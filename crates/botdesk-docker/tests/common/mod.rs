#![allow(dead_code)] // each test file uses a different part of this module
//! Shared set-up for tests against the real Docker engine. Each target gets its own data directory
//! (so its own `botdesk.data-dir` label) and removes every container with that label when dropped.

use botdesk_conformance::Target;
use botdesk_core::{ComputerId, ComputerScope, ComputerSpec, Resources};
use botdesk_docker::{image::image_tag, DockerConfig, DockerProvider};
use std::sync::Arc;

pub struct Cleanup {
    provider: Arc<DockerProvider>,
    pub dir: tempfile::TempDir,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let provider = self.provider.clone();
        // Drop cannot await: clean up on a thread with its own runtime.
        let _ = std::thread::spawn(move || {
            tokio::runtime::Runtime::new().unwrap().block_on(async {
                for found in provider.list_managed().await.unwrap_or_default() {
                    let _ = provider.remove_container(&found.id).await;
                }
                for v in provider.list_volumes(None).await.unwrap_or_default() {
                    let _ = provider.remove_volume(&v).await;
                }
            })
        })
        .join();
    }
}

/// A provider with a data-dir label of its own; the guard removes its containers when dropped.
pub async fn docker_provider() -> (Arc<DockerProvider>, Cleanup) {
    let dir = tempfile::tempdir().unwrap();
    let label = format!("test{}", uuid::Uuid::new_v4().simple());
    let provider = Arc::new(DockerProvider::new(DockerConfig::new(image_tag(), label)));
    let version = provider.engine_version().await.expect("the Docker engine must run for these tests (cargo xtask test starts it)");
    assert!(!version.is_empty());
    assert!(
        provider.image_present(&image_tag()).await.unwrap(),
        "the computer image {} is missing: `cargo xtask test` builds it (or `botdesk image build`)",
        image_tag()
    );
    (provider.clone(), Cleanup { provider, dir })
}

pub async fn docker_target() -> Target {
    let (provider, cleanup) = docker_provider().await;
    target(provider, cleanup, botdesk_core::HostName::local())
}

/// A target on `provider`, its computers' homes named after its data-dir label.
fn target(provider: Arc<DockerProvider>, cleanup: Cleanup, host: botdesk_core::HostName) -> Target {
    let label = provider.config().data_dir_label.clone();
    Target {
        provider: provider.clone(),
        make_spec: Box::new(move |name| ComputerSpec {
            id: ComputerId::new(name),
            name: name.to_string(),
            scope: ComputerScope::Team,
            home_volume: format!("{label}-{name}"),
            resources: Resources::default(),
            host: host.clone(),
        }),
        guard: Some(Box::new(cleanup)),
    }
}

/// The second Docker engine `cargo xtask test` starts "on another machine" (a network namespace
/// of its own, reached over TCP with mutual TLS), with the computer image sent there once per
/// test program.
pub async fn remote_provider() -> (Arc<DockerProvider>, Cleanup) {
    use botdesk_docker::remote::{RemoteEngine, RemoteHost};
    static SENT: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    let url = std::env::var("BOTDESK_TEST_REMOTE_URL")
        .expect("BOTDESK_TEST_REMOTE_URL is unset: run the tests with `cargo xtask test`, which starts a second Docker engine");
    let tls = std::env::var("BOTDESK_TEST_REMOTE_TLS").expect("BOTDESK_TEST_REMOTE_TLS is unset: run the tests with `cargo xtask test`");
    let engine = RemoteEngine { url, tls_dir: std::path::Path::new(&tls).join("good") };
    SENT.get_or_init(|| async {
        let (local, _guard) = docker_provider().await;
        let remote = engine.client().unwrap();
        botdesk_docker::remote::send_image(local.client().await.unwrap(), &remote, &image_tag(), &|_, _| {})
            .await
            .expect("sending the image to the second engine");
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let label = format!("test{}", uuid::Uuid::new_v4().simple());
    let mut cfg = DockerConfig::new(image_tag(), label);
    cfg.remote = Some(RemoteHost { name: botdesk_core::HostName::new("far"), engine });
    let provider = Arc::new(DockerProvider::new(cfg));
    assert!(provider.engine_version().await.unwrap().len() > 1);
    (provider.clone(), Cleanup { provider, dir })
}

pub async fn remote_target() -> Target {
    let (provider, cleanup) = remote_provider().await;
    target(provider, cleanup, botdesk_core::HostName::new("far"))
}
