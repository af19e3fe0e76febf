//! `cargo xtask bench`.

use super::*;

pub(crate) fn bench(extra: &[String]) -> Result {
    prepare(true)?;
    // The viewer's anchor: noVNC in headless Chromium through websockify.
    EXTRA.lock().unwrap().extend_from_slice(BENCH_PACKAGES);
    install_packages(true)?;
    say("building the app, the CLI and the benchmarks (release)");
    status(cargo().args(["build", "--release", "-p", "botdesk-app", "-p", "botdesk-bench", "-p", "botdesk-cli"]))?;
    let mut envs = vec![];
    let services = start_services(&mut envs, &[])?;
    // A computer on another machine: the second engine, over a link the bench shapes.
    let remote = RemoteEngine::start(&mut envs, &[])?;
    envs.push(("BOTDESK_BENCH_LINK_VETH".into(), remote.veth.clone()));
    envs.push(("BOTDESK_BENCH_LINK_NETNS".into(), remote.netns.clone()));
    let site = TestSite::start(&mut envs, &[])?;
    say("running the benchmarks");
    // `--only SECTION` prints one section and writes nothing; otherwise the whole table is written.
    let mut bench = Command::new(root().join("target/release/botdesk-bench"));
    if extra.first().map(String::as_str) != Some("--only") {
        bench.arg(root().join("docs/benchmarks.md"));
    }
    let result = status(bench.args(extra).envs(envs.iter().map(|(k, v)| (k, v))));
    drop(site);
    drop(remote);
    drop(services);
    result
}
