//! The network policy: what its enforcement costs a page load (the bot's Chromium loading a page
//! of the tests' web site by name, under `allow` that name beside `open`, in alternating rounds),
//! a 1 MiB download through it (a bot's `curl`, which goes through the policy, beside root's,
//! which does not), and how soon a connection already open is closed once the bot is `offline`.

use botdesk_core::{
    BotId, BotNetwork, BotUser, BrowserCommand, CallCtx, ComputerId, ComputerProvider, ComputerRef, ComputerScope, ComputerSpec, NetPolicy, Resources,
};
use botdesk_docker::{image::image_tag, DockerConfig, DockerProvider};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{median, table_row, Row};

const SLOT: u32 = 1;
const PROFILE: &str = "chromium-bot-00000000000000000000000000000001";

pub async fn run() -> (Row, Row, Row) {
    let site = std::env::var("BOTDESK_TEST_SITE_PUBLIC").expect("`cargo xtask bench` serves the tests' web site (BOTDESK_TEST_SITE_PUBLIC)");
    let image = image_tag();
    let provider = DockerProvider::new(DockerConfig::new(&image, format!("benchnet{}", uuid::Uuid::new_v4().simple())));
    let ctx = CallCtx::default();
    let id = format!("bench-net-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let spec = ComputerSpec {
        id: ComputerId::new(&id),
        name: id.clone(),
        scope: ComputerScope::Private,
        home_volume: format!("{}-home-net", provider.config().data_dir_label),
        resources: Resources::default(),
        host: botdesk_core::HostName::local(),
    };
    provider.provision(&spec, &ctx).await.unwrap();
    let c = ComputerRef::from(&spec);
    let box_id = crate::desktops::container_of(&id);
    let hosts = format!("echo '{site} site.test' >> /etc/hosts");
    assert!(Command::new("docker").args(["exec", "-u", "0", &box_id, "sh", "-c", &hosts]).status().unwrap().success());
    provider.open_desktop(&c, &BotId::new("bench"), SLOT, &botdesk_engine::new_token(), &ctx).await.unwrap();
    let bot = CallCtx { user: BotUser::PRIVATE, display: Some(SLOT), ..CallCtx::default() };
    let policy = |p: NetPolicy| [BotNetwork { uid: BotUser::PRIVATE.uid, policy: p }];
    let allow = NetPolicy::allow(["site.test"]).unwrap();

    // 1. Page loads, by name, in alternating rounds of ten.
    let (mut open, mut allowed) = (vec![], vec![]);
    let mut n = 0;
    for round in 0..8 {
        let under = if round % 2 == 0 { NetPolicy::Open } else { allow.clone() };
        provider.set_network(&c, &policy(under), &ctx).await.unwrap();
        for _ in 0..10 {
            n += 1;
            let url = format!("http://site.test:8080/?n={n}");
            let t = Instant::now();
            let page = match provider.page_browser(&c, SLOT, PROFILE, &BrowserCommand::Navigate { url }, &bot).await {
                Ok(p) => p,
                Err(e) => {
                    let diag = "ss -tnpo; tail -20 /tmp/botdesk-logs/gateway.log; tail -30 /tmp/botdesk-browser-logs-1000/chromium-1.log";
                    let out = Command::new("docker").args(["exec", "-u", "0", &box_id, "sh", "-c", diag]).output().unwrap();
                    panic!("round {round}: {e}\n{}", String::from_utf8_lossy(&out.stdout));
                }
            };
            let took = t.elapsed();
            assert_eq!(page["title"], "Test site", "{page}");
            if round > 0 {
                if round % 2 == 0 { &mut open } else { &mut allowed }.push(took);
            }
        }
    }

    // 2. 1 MiB through the policy (a bot, `open`) beside root's download, which is not sent there.
    provider.set_network(&c, &policy(NetPolicy::Open), &ctx).await.unwrap();
    let url = format!("http://{site}:8080/big");
    let (mut through, mut direct) = (vec![], vec![]);
    let curl = |user: &str| {
        let t = Instant::now();
        assert!(Command::new("docker").args(["exec", "-u", user, &box_id, "curl", "-sSf", "-o", "/dev/null", &url]).status().unwrap().success());
        t.elapsed()
    };
    for _ in 0..10 {
        through.push(curl(crate::BOT));
        direct.push(curl("0:0"));
    }

    // 3. A connection already open (a stream), closed once the bot is set `offline`: from the
    // call that sets it to the stream's end, beside the call itself.
    let (mut closed, mut applying) = (vec![], vec![]);
    let log = |what: &str| {
        let out = Command::new("docker").args(["exec", "-u", crate::BOT, &box_id, "sh", "-c", "cat ~/stream.log 2>/dev/null"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).contains(what)
    };
    for _ in 0..5 {
        provider.set_network(&c, &policy(NetPolicy::Open), &ctx).await.unwrap();
        let stream = format!("(curl -sSN http://{site}:8080/stream; echo ended) > ~/stream.log 2>&1");
        assert!(Command::new("docker").args(["exec", "-d", "-u", crate::BOT, &box_id, "sh", "-c", &stream]).status().unwrap().success());
        while !log("tick") {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let t = Instant::now();
        provider.set_network(&c, &policy(NetPolicy::Offline), &ctx).await.unwrap();
        applying.push(t.elapsed());
        while !log("ended") {
            assert!(t.elapsed() < Duration::from_secs(60), "the open stream outlived `offline` by a minute");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        closed.push(t.elapsed());
    }
    provider.destroy(&c, &ctx).await.unwrap();
    (
        Row {
            what: "page load by name under `allow` (Chromium, through the policy; mean)",
            ours: mean(&allowed),
            anchor_name: "the same under `open` (mean)",
            anchor: mean(&open),
            n: 30,
        },
        Row {
            what: "1 MiB download by a bot's `curl` (through the policy)",
            ours: median(through),
            anchor_name: "root's `curl` (not through it)",
            anchor: median(direct),
            n: 10,
        },
        Row {
            what: "an open connection closed after `offline` is set (from the call)",
            ours: median(closed),
            anchor_name: "setting the policy (the provider's call)",
            anchor: median(applying),
            n: 5,
        },
    )
}

/// Page loads here come in two groups (about 35 ms and 125 ms, in both modes: the gateway's wait
/// for the page's load), so a median jumps between them; their mean does not.
fn mean(v: &[Duration]) -> Duration {
    v.iter().sum::<Duration>() / v.len() as u32
}

/// The section for docs/benchmarks.md.
pub fn section(rows: &(Row, Row, Row)) -> String {
    let mut md = String::from(
        "\n## Network policy\n\nEvery TCP connection a bot opens goes through its computer's network policy (the screen gateway's process), which decides by the bot's policy. A page of the tests' web site (in a network namespace of its own, at an address outside the private ranges, reached by a name the computer maps to it), loaded by the bot's Chromium: under `allow` that name (the policy reads the name the browser sends and checks the address is the name's) beside `open` (only the address is checked), in alternating rounds. Then a 1 MiB download by a bot's `curl` (through the policy) beside root's in the same computer (not through it), each started by `docker exec`, which is counted. Last, a bot's `curl` of a stream that never ends, and the bot set `offline`: the time from the call that sets it until the stream ended (the gateway re-reads the policies every half second and closes what they now refuse; the log is looked at every 20 ms through `docker exec`), beside that call. Page loads come in two groups in both modes (about 35 ms and 125 ms, by when the gateway sees the page loaded), so theirs are means; the downloads are medians.\n\n| what | ours (median) | anchor | anchor (median) | ratio | n |\n|---|---|---|---|---|---|\n",
    );
    md.push_str(&table_row(&rows.0));
    md.push_str(&table_row(&rows.1));
    md.push_str(&table_row(&rows.2));
    md
}
