//! The computer image: its recipe is embedded in the binary, its tag is the recipe's content hash,
//! and it is built where it is missing. Every build is also tagged with its day,
//! `<hash>-<YYYYMMDD>` (its freshness stamp): the recipe does not change when Debian ships a new
//! Chromium, so `doctor` tells from the stamp when the packages inside are old, and a refresh
//! rebuilds from scratch with current packages. Where the base image cannot be pulled, the base is made
//! with debootstrap from the Debian mirror the host's apt already uses, and imported.

use bollard::image::{BuildImageOptions, CreateImageOptions, TagImageOptions};
use botdesk_core::{ComputerError, Result};
use bytes::Bytes;
use futures::StreamExt;
use sha2::{Digest, Sha256};
use std::{collections::HashMap, path::Path};
use tokio::io::AsyncBufReadExt;

use crate::{docker_err, DockerProvider};

pub const REPO: &str = "botdesk/computer";
pub const DEFAULT_BASE: &str = "debian:bookworm-slim";
/// What the debootstrap fallback imports its base as.
pub const LOCAL_BASE: &str = "botdesk/base:bookworm";

/// (name in the build context, bytes, mode) of every recipe file.
pub const RECIPE: &[(&str, &[u8], u32)] = &[
    ("Dockerfile", include_bytes!("../../../infra/sandboxes/computer/Dockerfile"), 0o644),
    ("start.sh", include_bytes!("../../../infra/sandboxes/computer/start.sh"), 0o755),
    ("botdesk-helper", include_bytes!("../../../infra/sandboxes/computer/botdesk-helper"), 0o755),
    ("botdesk-read", include_bytes!("../../../infra/sandboxes/computer/botdesk-read"), 0o755),
    ("botdesk-display", include_bytes!("../../../infra/sandboxes/computer/botdesk-display"), 0o755),
    ("botdesk-gateway", include_bytes!("../../../infra/sandboxes/computer/botdesk-gateway"), 0o755),
    ("botdesk-keep", include_bytes!("../../../infra/sandboxes/computer/botdesk-keep"), 0o755),
    ("botdesk-mcp-http", include_bytes!("../../../infra/sandboxes/computer/botdesk-mcp-http"), 0o755),
    ("botdesk_helper.py", include_bytes!("../../../infra/sandboxes/computer/botdesk_helper.py"), 0o644),
    ("botdesk_gateway.py", include_bytes!("../../../infra/sandboxes/computer/botdesk_gateway.py"), 0o644),
    ("botdesk_net.py", include_bytes!("../../../infra/sandboxes/computer/botdesk_net.py"), 0o644),
    ("uv.version", include_bytes!("../../../infra/sandboxes/computer/uv.version"), 0o644),
];

/// `botdesk/computer:<first 12 hex of the recipe's SHA-256>`: a changed recipe is a new image.
pub fn image_tag() -> String {
    let mut h = Sha256::new();
    for (name, bytes, mode) in RECIPE {
        h.update(name.as_bytes());
        h.update([0]);
        h.update(mode.to_le_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    }
    format!("{REPO}:{}", &hex::encode(h.finalize())[..12])
}

/// The day of a date written `YYYYMMDD` or starting `YYYY-MM-DD` (Docker's RFC 3339 `Created`),
/// as days since 1970-01-01.
pub fn day_of(date: &str) -> Option<i64> {
    let digits: String = date.chars().filter(|c| *c != '-').take(8).collect();
    if digits.len() != 8 || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let (y, m, d) = (digits[..4].parse().ok()?, digits[4..6].parse().ok()?, digits[6..].parse().ok()?);
    ((1..=12).contains(&m) && (1..=31).contains(&d)).then(|| botdesk_core::civil::days_from_civil(y, m, d))
}

pub fn uv_version() -> &'static str {
    let (_, bytes, _) = RECIPE.iter().find(|(name, _, _)| *name == "uv.version").expect("uv.version is in the recipe");
    std::str::from_utf8(bytes).unwrap_or("").trim()
}

pub use botdesk_core::machine::BuildProgress;

#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    /// Base image to build on; default `debian:bookworm-slim` when present or pullable, else
    /// a debootstrapped base.
    pub base: Option<String>,
    /// Where downloads are kept between builds.
    pub cache_dir: std::path::PathBuf,
    /// Rebuild every layer with current packages (no build cache).
    pub refresh: bool,
    /// Today, `YYYYMMDD`: the build's freshness stamp.
    pub stamp: String,
}

impl DockerProvider {
    pub async fn image_present(&self, image: &str) -> Result<bool> {
        match self.client().await?.inspect_image(image).await {
            Ok(_) => Ok(true),
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => Ok(false),
            Err(e) => Err(docker_err(e)),
        }
    }

    /// Builds this provider's image (its tag is in the config), reporting progress as it goes.
    pub async fn build_image(&self, opts: &BuildOptions, progress: &(dyn Fn(BuildProgress) + Send + Sync)) -> Result<String> {
        let image = self.cfg.image.clone();
        let base = self.ensure_base(opts, progress).await?;
        let wheel = fetch_uv(&opts.cache_dir, progress).await?;
        let context = build_context(&wheel)?;
        let options = BuildImageOptions {
            t: image.clone(),
            rm: true,
            forcerm: true,
            buildargs: HashMap::from([("BASE".to_string(), base)]),
            labels: HashMap::from([("botdesk.managed".to_string(), "1".to_string())]),
            nocache: opts.refresh,
            ..Default::default()
        };
        let mut stream = self.client().await?.build_image(options, None, Some(context));
        let mut last_lines: Vec<String> = vec![];
        while let Some(item) = stream.next().await {
            let info = item.map_err(|e| ComputerError::Provider(format!("image build failed: {e}\n{}", last_lines.join(""))))?;
            if let Some(err) = info.error {
                return Err(ComputerError::Provider(format!("image build failed: {err}\n{}", last_lines.join(""))));
            }
            if let Some(line) = info.stream {
                if let Some((step, total, message)) = parse_step(&line) {
                    progress(BuildProgress::Step { step, total, message });
                }
                last_lines.push(line);
                if last_lines.len() > 30 {
                    last_lines.remove(0);
                }
            }
        }
        if !self.image_present(&image).await? {
            return Err(ComputerError::Provider(format!("image build ended but {image} is missing:\n{}", last_lines.join(""))));
        }
        let (repo, tag) = image.rsplit_once(':').unwrap_or((REPO, "latest"));
        let stamped = TagImageOptions { repo: repo.to_string(), tag: format!("{tag}-{}", opts.stamp) };
        self.client().await?.tag_image(&image, Some(stamped)).await.map_err(docker_err)?;
        progress(BuildProgress::Done { image: image.clone() });
        Ok(image)
    }

    /// How many days old the packages in `image` are at `now_ms`: from its freshness stamp, or
    /// (an image built before stamps) from when it was made. None when Docker cannot say.
    pub async fn image_age_days(&self, image: &str, now_ms: i64) -> Result<Option<i64>> {
        let info = self.client().await?.inspect_image(image).await.map_err(docker_err)?;
        let prefix = format!("{image}-");
        let stamped = info.repo_tags.unwrap_or_default().iter().filter_map(|t| t.strip_prefix(&prefix).and_then(day_of)).max();
        let day = stamped.or_else(|| info.created.as_deref().and_then(day_of));
        Ok(day.map(|d| now_ms.div_euclid(86_400_000) - d))
    }

    async fn ensure_base(&self, opts: &BuildOptions, progress: &(dyn Fn(BuildProgress) + Send + Sync)) -> Result<String> {
        if let Some(base) = &opts.base {
            return Ok(base.clone());
        }
        for candidate in [DEFAULT_BASE, LOCAL_BASE] {
            if self.image_present(candidate).await? {
                return Ok(candidate.to_string());
            }
        }
        progress(BuildProgress::Base { message: format!("pulling {DEFAULT_BASE}") });
        let pull = CreateImageOptions { from_image: DEFAULT_BASE, ..Default::default() };
        let mut pulling = self.client().await?.create_image(Some(pull), None, None);
        let mut pulled = true;
        while let Some(item) = pulling.next().await {
            if let Err(e) = item {
                progress(BuildProgress::Base { message: format!("cannot pull {DEFAULT_BASE} ({e}); making the base with debootstrap") });
                pulled = false;
                break;
            }
        }
        if pulled && self.image_present(DEFAULT_BASE).await? {
            return Ok(DEFAULT_BASE.to_string());
        }
        self.debootstrap_base(opts, progress).await?;
        Ok(LOCAL_BASE.to_string())
    }

    async fn debootstrap_base(&self, opts: &BuildOptions, progress: &(dyn Fn(BuildProgress) + Send + Sync)) -> Result<()> {
        let fail = |m: String| ComputerError::Provider(m);
        if which("debootstrap").is_none() {
            return Err(fail(format!(
                "{DEFAULT_BASE} cannot be pulled and debootstrap is not installed: install it (`sudo apt-get install debootstrap`) or load a Debian bookworm image"
            )));
        }
        let mirror = debian_mirror();
        std::fs::create_dir_all(&opts.cache_dir).map_err(|e| fail(format!("cannot create {}: {e}", opts.cache_dir.display())))?;
        let root = tempfile::Builder::new()
            .prefix("debootstrap-")
            .tempdir_in(&opts.cache_dir)
            .map_err(|e| fail(format!("cannot create a folder for debootstrap: {e}")))?;
        progress(BuildProgress::Base { message: format!("debootstrap bookworm from {mirror}") });
        let mut child = tokio::process::Command::new("debootstrap")
            .args(["--variant=minbase", "bookworm"])
            .arg(root.path())
            .arg(&mirror)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| fail(format!("cannot run debootstrap: {e}")))?;
        let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("piped")).lines();
        let mut tail = vec![];
        while let Ok(Some(line)) = lines.next_line().await {
            progress(BuildProgress::Base { message: line.clone() });
            tail.push(line);
        }
        let out = child.wait_with_output().await.map_err(|e| fail(format!("debootstrap: {e}")))?;
        if !out.status.success() {
            let n = tail.len().saturating_sub(10);
            return Err(fail(format!(
                "debootstrap failed ({}; it needs root): {}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim(),
                tail[n..].join("\n")
            )));
        }
        progress(BuildProgress::Base { message: format!("importing the base as {LOCAL_BASE}") });
        let tar = tokio::process::Command::new("tar")
            .arg("-C")
            .arg(root.path())
            .args(["-c", "."])
            .output()
            .await
            .map_err(|e| fail(format!("cannot run tar: {e}")))?;
        if !tar.status.success() {
            return Err(fail(format!("tar of the base failed: {}", String::from_utf8_lossy(&tar.stderr))));
        }
        let (repo, tag) = LOCAL_BASE.split_once(':').expect("tagged");
        let import = CreateImageOptions { from_src: "-", repo, tag, ..Default::default() };
        let mut importing = self.client().await?.create_image(Some(import), Some(Bytes::from(tar.stdout)), None);
        while let Some(item) = importing.next().await {
            item.map_err(|e| fail(format!("importing the base failed: {e}")))?;
        }
        Ok(())
    }
}

fn parse_step(line: &str) -> Option<(u32, u32, String)> {
    let rest = line.trim().strip_prefix("Step ")?;
    let (nums, message) = rest.split_once(" : ")?;
    let (a, b) = nums.split_once('/')?;
    Some((a.parse().ok()?, b.parse().ok()?, message.trim().to_string()))
}

fn which(cmd: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).chain(["/usr/sbin".into(), "/sbin".into()]).map(|d| d.join(cmd)).find(|p| p.is_file())
}

/// The Debian mirror the host's apt already uses (`BOTDESK_DEBIAN_MIRROR` overrides it).
pub fn debian_mirror() -> String {
    if let Ok(m) = std::env::var("BOTDESK_DEBIAN_MIRROR") {
        return m;
    }
    let mut texts = vec![];
    if let Ok(t) = std::fs::read_to_string("/etc/apt/sources.list") {
        texts.push(t);
    }
    if let Ok(dir) = std::fs::read_dir("/etc/apt/sources.list.d") {
        let mut paths: Vec<_> = dir.flatten().map(|e| e.path()).collect();
        paths.sort();
        texts.extend(paths.iter().filter_map(|p| std::fs::read_to_string(p).ok()));
    }
    texts.iter().find_map(|t| mirror_in(t)).unwrap_or_else(|| "http://deb.debian.org/debian".to_string())
}

/// Finds a Debian main archive (not security) in one-line or deb822 apt sources.
fn mirror_in(text: &str) -> Option<String> {
    let usable = |uri: &str| (uri.starts_with("http://") || uri.starts_with("https://")) && !uri.contains("security");
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() == Some(&"deb") {
            let uri = words.iter().skip(1).find(|w| !w.starts_with('['))?;
            if usable(uri) && words.iter().any(|w| w.starts_with("bookworm")) {
                return Some(uri.to_string());
            }
        }
    }
    for stanza in text.split("\n\n") {
        let field = |name: &str| stanza.lines().find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()));
        if let (Some(uris), Some(suites)) = (field("URIs:"), field("Suites:")) {
            if suites.split_whitespace().any(|s| s == "bookworm") {
                if let Some(uri) = uris.split_whitespace().find(|u| usable(u)) {
                    return Some(uri.to_string());
                }
            }
        }
    }
    None
}

/// The uv wheel, fetched on the host with pip (the container cannot reach that registry over TLS).
async fn fetch_uv(cache: &Path, progress: &(dyn Fn(BuildProgress) + Send + Sync)) -> Result<std::path::PathBuf> {
    let version = uv_version();
    let arch = match std::env::consts::ARCH {
        "aarch64" => "aarch64",
        _ => "x86_64",
    };
    let wheel = cache.join(format!("uv-{version}-{arch}.whl"));
    if wheel.is_file() {
        return Ok(wheel);
    }
    std::fs::create_dir_all(cache).map_err(|e| ComputerError::Provider(format!("cannot create {}: {e}", cache.display())))?;
    progress(BuildProgress::FetchUv { message: format!("downloading uv {version} with pip") });
    let dir = tempfile::tempdir_in(cache).map_err(|e| ComputerError::Provider(format!("temp dir: {e}")))?;
    let out = tokio::process::Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.11", "--platform"])
        .arg(format!("manylinux_2_17_{arch}"))
        .arg(format!("uv=={version}"))
        .arg("-d")
        .arg(dir.path())
        .output()
        .await
        .map_err(|e| ComputerError::Provider(format!("cannot run pip to fetch uv (install python3-pip): {e}")))?;
    if !out.status.success() {
        return Err(ComputerError::Provider(format!("fetching uv {version} failed: {}", String::from_utf8_lossy(&out.stderr).trim())));
    }
    let found = std::fs::read_dir(dir.path())
        .ok()
        .and_then(|d| d.flatten().map(|e| e.path()).find(|p| p.extension().is_some_and(|x| x == "whl")))
        .ok_or_else(|| ComputerError::Provider("pip reported success but left no uv wheel".into()))?;
    std::fs::rename(&found, &wheel).map_err(|e| ComputerError::Provider(format!("keeping the uv wheel: {e}")))?;
    Ok(wheel)
}

fn build_context(wheel: &Path) -> Result<Bytes> {
    let io = |e: std::io::Error| ComputerError::Provider(format!("build context: {e}"));
    let mut tar = tar::Builder::new(Vec::new());
    for (name, bytes, mode) in RECIPE {
        let mut h = tar::Header::new_gnu();
        h.set_size(bytes.len() as u64);
        h.set_mode(*mode);
        tar.append_data(&mut h, name, *bytes).map_err(io)?;
    }
    let wheel_bytes = std::fs::read(wheel).map_err(io)?;
    let mut h = tar::Header::new_gnu();
    h.set_size(wheel_bytes.len() as u64);
    h.set_mode(0o644);
    tar.append_data(&mut h, "uv.whl", &wheel_bytes[..]).map_err(io)?;
    Ok(Bytes::from(tar.into_inner().map_err(io)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use botdesk_core::civil::stamp_of;

    #[test]
    fn stamps_and_days_agree() {
        assert_eq!(stamp_of(0), "19700101");
        assert_eq!(day_of("19700101"), Some(0));
        assert_eq!(day_of("2026-12-01T02:44:03.123456789Z"), day_of("20261201"));
        for ms in [951_782_400_000i64, 1_709_164_800_000, 1_796_083_200_000, 4_102_444_800_000] {
            assert_eq!(day_of(&stamp_of(ms)), Some(ms / 86_400_000), "{ms}");
        }
        for bad in ["", "2026", "20261301", "2026-1x-01", "abcdefgh"] {
            assert_eq!(day_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn tag_is_stable_and_content_derived() {
        assert_eq!(image_tag(), image_tag());
        assert!(image_tag().starts_with("botdesk/computer:"));
        assert_eq!(image_tag().len(), "botdesk/computer:".len() + 12);
    }

    #[test]
    fn steps_and_mirrors_parse() {
        assert_eq!(parse_step("Step 3/9 : RUN true\n"), Some((3, 9, "RUN true".into())));
        assert_eq!(parse_step(" ---> abc"), None);
        let deb822 = "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\nTypes: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n";
        assert_eq!(mirror_in(deb822).as_deref(), Some("http://mirror.example/debian"));
        assert_eq!(mirror_in("deb [arch=amd64] http://m.example/debian bookworm main\n").as_deref(), Some("http://m.example/debian"));
        assert_eq!(mirror_in("deb http://m.example/ubuntu jammy main\n"), None);
    }
}
