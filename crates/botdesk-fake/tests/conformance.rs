use botdesk_conformance::{conformance_suite, home_pairing, Target};
use botdesk_core::{ComputerId, ComputerScope, ComputerSpec, Resources};
use std::sync::Arc;

async fn fake() -> Target {
    Target {
        provider: Arc::new(botdesk_fake::FakeProvider::new()),
        make_spec: Box::new(|name| ComputerSpec {
            id: ComputerId::new(name),
            name: name.to_string(),
            scope: ComputerScope::Team,
            home_volume: format!("fake-{name}"),
            resources: Resources::default(),
            host: botdesk_core::HostName::local(),
        }),
        guard: None,
    }
}

conformance_suite!(fake());

#[tokio::test]
async fn fake_to_fake_pairing() {
    home_pairing(&fake().await, &fake().await).await;
}
