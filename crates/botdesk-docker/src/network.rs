//! Each computer's own Docker network: a bridge with traffic between its containers off, so no
//! computer (and no other container) can reach another computer's gateway or a server its bot
//! started. The gateway is reached only through its port published on the host's 127.0.0.1; a
//! bot reaches the internet, and services of this machine that listen on all its addresses.

use std::collections::{HashMap, HashSet};

use bollard::errors::Error::DockerResponseServerError;
use bollard::network::{CreateNetworkOptions, InspectNetworkOptions, ListNetworksOptions};
use botdesk_core::*;

use crate::{docker_err, spec, DockerProvider};

impl DockerProvider {
    /// Makes the network of `s` unless it exists; returns its name (the computer's container name).
    pub(crate) async fn ensure_network(&self, s: &ComputerSpec) -> Result<String> {
        let name = spec::container_name(&self.cfg.data_dir_label, s);
        let docker = self.client().await?;
        match docker.inspect_network(&name, None::<InspectNetworkOptions<String>>).await {
            Ok(_) => return Ok(name),
            Err(DockerResponseServerError { status_code: 404, .. }) => {}
            Err(e) => return Err(docker_err(e)),
        }
        let opts = CreateNetworkOptions {
            name: name.clone(),
            check_duplicate: true,
            driver: "bridge".to_string(),
            options: HashMap::from([("com.docker.network.bridge.enable_icc".to_string(), "false".to_string())]),
            labels: spec::labels(&self.cfg.data_dir_label, s.id.as_str(), self.cfg.test_run.as_deref()),
            ..Default::default()
        };
        match docker.create_network(opts).await {
            Ok(_) => Ok(name),
            // Made a moment ago by another process (the CLI beside the app).
            Err(DockerResponseServerError { status_code: 409, .. }) => Ok(name),
            Err(e) => Err(docker_err(e)),
        }
    }

    /// Removes this data directory's networks of one computer, or (reconcile) of every computer
    /// not in `keep`. One still in use (a container starting in another process) is left for the
    /// next time.
    pub async fn remove_networks(&self, computer: Option<&ComputerId>, keep: &HashSet<String>) -> Result<Vec<String>> {
        let mut label = vec![format!("{}=1", spec::LABEL_MANAGED), format!("{}={}", spec::LABEL_DATA_DIR, self.cfg.data_dir_label)];
        if let Some(c) = computer {
            label.push(format!("{}={c}", spec::LABEL_COMPUTER));
        }
        let opts = ListNetworksOptions { filters: HashMap::from([("label".to_string(), label)]) };
        let docker = self.client().await?;
        let mut removed = vec![];
        for n in docker.list_networks(Some(opts)).await.map_err(docker_err)? {
            let owner = n.labels.as_ref().and_then(|l| l.get(spec::LABEL_COMPUTER)).cloned().unwrap_or_default();
            let Some(name) = n.name else { continue };
            if keep.contains(&owner) {
                continue;
            }
            match docker.remove_network(&name).await {
                Ok(()) => removed.push(name),
                Err(DockerResponseServerError { status_code: 403 | 404 | 409, .. }) => {}
                Err(e) => return Err(docker_err(e)),
            }
        }
        Ok(removed)
    }
}
