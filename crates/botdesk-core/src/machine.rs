//! The machine-level side of a provider: what belongs to no one computer. The image computers
//! start from, the provider's own checks for `doctor`, what a crash left behind, the hosts on
//! other machines, and the [`ComputerProvider`] of the computers themselves (each call sent to its
//! computer's host). The engine holds one `dyn Machine` and never learns which provider it is.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;

use crate::{ComputerProvider, HostName, Result};

/// One line of `doctor`: what was checked, whether it passed, and how to fix it when not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct Check {
    /// `docker`, `image`, … and `host NAME` for each host on another machine.
    pub name: String,
    pub ok: bool,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub fix: Option<String>,
    /// Works, but should be seen to (an image whose packages are old).
    pub warn: bool,
}

impl Check {
    pub fn pass(name: impl Into<String>, detail: impl Into<String>) -> Check {
        Check { name: name.into(), ok: true, detail: detail.into(), fix: None, warn: false }
    }
    pub fn fail(name: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { name: name.into(), ok: false, detail: detail.into(), fix: Some(fix.into()), warn: false }
    }
    pub fn warn(name: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { name: name.into(), ok: true, detail: detail.into(), fix: Some(fix.into()), warn: true }
    }
}

/// What an image build (or an image's sending to another host) is doing now: real stages, not
/// estimated percentages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(tag = "stage", rename_all = "snake_case")]
pub enum BuildProgress {
    /// Fetching the uv wheel on the host.
    FetchUv {
        message: String,
    },
    /// Making the base image (debootstrap), with its log line.
    Base {
        message: String,
    },
    /// A Dockerfile step (`step` of `total`).
    Step {
        step: u32,
        total: u32,
        message: String,
    },
    /// Sending the image to a host on another machine: `sent` of about `total` bytes.
    Send {
        host: String,
        sent: u64,
        total: u64,
    },
    Done {
        image: String,
    },
}

/// How to build the computer image.
#[derive(Debug, Clone, Default)]
pub struct ImageBuild {
    /// The base image to build on (none: the provider's own choice).
    pub base: Option<String>,
    /// Where downloads are kept between builds.
    pub cache_dir: PathBuf,
    /// Rebuild every layer with current packages.
    pub refresh: bool,
    /// Today, in Unix ms (the image's freshness stamp).
    pub now_ms: i64,
}

/// What the data directory knows of, for [`Machine::reconcile`].
#[derive(Debug, Clone, Default)]
pub struct Known {
    /// Computer ids with a row (computers and spares).
    pub computers: HashSet<String>,
    /// Of those, the spares (left as they are).
    pub spares: HashSet<String>,
    /// Home volumes that are some computer's or spare's.
    pub homes: HashSet<String>,
}

/// A known computer [`Machine::reconcile`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundComputer {
    pub computer: String,
    pub running: bool,
    /// The provider's own name for it (Docker's container id).
    pub provider_ref: String,
}

/// What [`Machine::reconcile`] found and removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reconciled {
    /// Known computers found (the engine adopts them).
    pub found: Vec<FoundComputer>,
    /// Computers of this data directory with no row, removed.
    pub removed: Vec<String>,
    /// Home volumes that are no computer's home, removed.
    pub volumes_removed: Vec<String>,
    /// Networks whose computer is gone, removed.
    pub networks_removed: Vec<String>,
}

/// Where a host on another machine is reached: its address and the folder of its certificates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostAddr {
    pub url: String,
    pub tls_dir: PathBuf,
}

/// The hosts the person added, as the provider's router looks them up (the engine keeps them).
#[async_trait]
pub trait HostBook: Send + Sync {
    /// The address of the host by that name; None when it is not (or no longer) known.
    async fn host(&self, name: &HostName) -> Option<HostAddr>;
}

/// The provider's machine-level work. Errors are [`crate::ComputerError`]s, as the computers'.
#[async_trait]
pub trait Machine: Send + Sync {
    /// The provider of the computers, each call sent to its computer's host, the hosts on other
    /// machines looked up in `hosts` on first use. Made once, by the engine at its start.
    fn computers(&self, hosts: Arc<dyn HostBook>) -> Arc<dyn ComputerProvider>;
    /// Forgets a host's connection (it was removed, or its address changed).
    fn forget_host(&self, name: &HostName);
    /// The name of the image new computers start from.
    fn image_tag(&self) -> String;
    async fn image_present(&self) -> Result<bool>;
    /// Builds the image, reporting its stages; returns its name.
    async fn build_image(&self, build: &ImageBuild, progress: &(dyn Fn(BuildProgress) + Send + Sync)) -> Result<String>;
    /// The provider's own lines of `doctor` (its engine, the image, the users it runs as).
    async fn checks(&self, now_ms: i64) -> Vec<Check>;
    /// After a crash: removes what this data directory left on this machine that it does not
    /// know (computers, home volumes, networks), and says which known computers were found.
    async fn reconcile(&self, known: &Known) -> Result<Reconciled>;
    /// Checks a host on another machine with these certificates: what its engine says of itself
    /// (`Docker 24.0.7 (linux/amd64)`), or one line naming the problem and the fix (`Invalid`
    /// for an address or certificates that cannot work, `Unavailable` otherwise).
    async fn check_host(&self, name: &HostName, addr: &HostAddr) -> Result<String>;
    /// Sends the image to a host on another machine as one stream; false: it had it already.
    async fn send_image(&self, name: &HostName, addr: &HostAddr, progress: &(dyn Fn(BuildProgress) + Send + Sync)) -> Result<bool>;
}
