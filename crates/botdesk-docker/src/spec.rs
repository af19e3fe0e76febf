//! The container spec of a computer: labels, user, limits, mounts, its own network,
//! the one published port.

use bollard::{
    container::Config,
    models::{HostConfig, Mount, MountTypeEnum, PortBinding},
};
use botdesk_core::{BotUser, CallCtx, ComputerSpec, HOME};
use std::collections::HashMap;

pub const LABEL_MANAGED: &str = "botdesk.managed";
pub const LABEL_COMPUTER: &str = "botdesk.computer";
pub const LABEL_DATA_DIR: &str = "botdesk.data-dir";
/// Set by tests (from `BOTDESK_TEST_RUN`) so a test run can prove it left nothing behind.
pub const LABEL_TEST_RUN: &str = "botdesk.test-run";
pub const LABEL_TEST_BINARY: &str = "botdesk.test-binary";
/// The screen gateway's port inside the computer; published on 127.0.0.1 with a random host port.
pub const GATEWAY_PORT: &str = "7900/tcp";
/// The gateway's port inside the computer ([`GATEWAY_PORT`] as a number).
pub const GATEWAY_CONTAINER_PORT: u16 = 7900;

/// Who a process in the computer runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InComputer {
    /// A bot (see [`BotUser`]): its commands, shells, files and browser. Uid 1000 on a Private
    /// computer; its own uid and the bots' group on a Team one.
    Bot(BotUser),
    /// The screen services' user (botdesk-screen, uid 990): Xvfb, fluxbox, x11vnc and the screen
    /// gateway. Bots cannot signal, trace or replace its processes, nor read its files.
    Screen,
    /// Root, to start `botdesk-keep` (which runs a bot's command as the bot in a group of
    /// processes it cannot leave, see [`kept`]) and for the helper's whole-home work (checkpoint,
    /// restore, owners), which reads and writes every bot's folder. The computer's root holds
    /// NET_ADMIN, SETUID, SETGID, SETPCAP, CHOWN, DAC_OVERRIDE, DAC_READ_SEARCH and FOWNER; no
    /// process of a bot can become root (no-new-privileges, no setuid programs).
    Root,
}

impl InComputer {
    /// Docker's `user` of an exec (`uid:gid`).
    pub fn user(self) -> String {
        let (uid, gid) = match self {
            // A bot is never root nor a system user: a uid that says so (a record gone wrong)
            // runs as nobody.
            InComputer::Bot(u) if u.uid < 1000 || u.gid < 1000 => (65534, 65534),
            InComputer::Bot(u) => (u.uid, u.gid),
            InComputer::Screen => (990, 990),
            InComputer::Root => (0, 0),
        };
        format!("{uid}:{gid}")
    }
}

/// A bot's command (or shell) as `botdesk-keep` runs it: as `user`, in `cwd`, below a keeper
/// that shows `tags` (`KEY=VALUE`) in its command line. Whatever the command starts, even with
/// `setsid` and an empty environment, stays below the keeper, and `botdesk-helper kill` ends it
/// all by any of those tags. Started as [`InComputer::Root`] in `/`: root may not need to enter a
/// folder only the bot can (the command does, as the bot).
pub fn kept(cwd: &str, user: BotUser, tags: &[String], argv: Vec<String>) -> Vec<String> {
    let mut kept = vec!["botdesk-keep".to_string(), cwd.to_string(), format!("{}:{}", user.uid, user.gid)];
    kept.extend(tags.iter().cloned());
    kept.push("--".into());
    kept.extend(argv);
    kept
}

/// The bot's home inside the computer (`HOME` of what it runs): its folder on a Team computer,
/// the whole home on a Private one.
pub fn home_of(ctx: &CallCtx) -> String {
    match &ctx.bot {
        Some(bot) if ctx.user != BotUser::PRIVATE => botdesk_core::path::bot_folder(bot).in_computer(),
        _ => HOME.to_string(),
    }
}

pub fn container_name(data_dir_label: &str, spec: &ComputerSpec) -> String {
    container_name_of(data_dir_label, &spec.id)
}

/// The name of a computer's container (unique per data directory and computer; provision refuses
/// a container of that name without our labels).
pub fn container_name_of(data_dir_label: &str, computer: &botdesk_core::ComputerId) -> String {
    format!("botdesk-{}-{computer}", &data_dir_label[..8.min(data_dir_label.len())])
}

pub fn labels(data_dir_label: &str, computer: &str, test_run: Option<&str>) -> HashMap<String, String> {
    let mut l = HashMap::from([
        (LABEL_MANAGED.to_string(), "1".to_string()),
        (LABEL_COMPUTER.to_string(), computer.to_string()),
        (LABEL_DATA_DIR.to_string(), data_dir_label.to_string()),
    ]);
    if let Some(run) = test_run {
        l.insert(LABEL_TEST_RUN.to_string(), run.to_string());
        // Which test program made it: a leftover container then names its test.
        if let Some(exe) = std::env::current_exe().ok().and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned())) {
            l.insert(LABEL_TEST_BINARY.to_string(), exe);
        }
    }
    l
}

/// The IPv4 addresses of this machine but loopback (from the kernel's routing table): a computer
/// on this machine's Docker is fenced from each of them (`start.sh`), whatever the person runs
/// on them.
pub fn host_addresses() -> Vec<std::net::Ipv4Addr> {
    let trie = std::fs::read_to_string("/proc/net/fib_trie").unwrap_or_default();
    let lines: Vec<&str> = trie.lines().collect();
    let mut out: Vec<std::net::Ipv4Addr> = lines
        .windows(2)
        .filter(|w| w[1].trim() == "/32 host LOCAL")
        .filter_map(|w| w[0].trim().trim_start_matches(['|', '+', '-', ' ']).parse().ok())
        .filter(|a: &std::net::Ipv4Addr| !a.is_loopback())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// `agent_token` is the engine's capability on the screen gateway (screenshots and input);
/// `network` the computer's own network; `fence` addresses no process of the computer reaches
/// (the host's own), besides the private and reserved ranges and its gateway.
pub fn container_config(
    image: &str,
    labels: HashMap<String, String>,
    spec: &ComputerSpec,
    agent_token: &str,
    network: &str,
    fence: &[std::net::Ipv4Addr],
) -> Config<String> {
    let r = spec.resources;
    let fence = fence.iter().map(|a| format!("{a}/32")).collect::<Vec<_>>().join(" ");
    Config {
        image: Some(image.to_string()),
        hostname: Some("botdesk".into()),
        // The container's own process (start.sh) fences the network as root, then becomes the
        // screen services' user and brings them up.
        user: Some("0:0".into()),
        env: Some(vec![
            format!("BOTDESK_COMPUTER_ID={}", spec.id),
            format!("HOME={HOME}"),
            format!("BOTDESK_AGENT_TOKEN={agent_token}"),
            format!("BOTDESK_FENCE={fence}"),
        ]),
        labels: Some(labels),
        exposed_ports: Some(HashMap::from([(GATEWAY_PORT.to_string(), HashMap::new())])),
        host_config: Some(HostConfig {
            // The home is a volume the engine owns: the host never walks a tree a bot can write.
            mounts: Some(vec![Mount {
                target: Some(HOME.into()),
                source: Some(spec.home_volume.clone()),
                typ: Some(MountTypeEnum::VOLUME),
                ..Default::default()
            }]),
            // Alone on its own network, with traffic between its containers off; start.sh's fence
            // keeps its processes from every private address but its gateway (the host).
            network_mode: Some(network.to_string()),
            // No IPv6 at all: the fence is IPv4 routing.
            sysctls: Some(HashMap::from([
                ("net.ipv6.conf.all.disable_ipv6".to_string(), "1".to_string()),
                ("net.ipv6.conf.default.disable_ipv6".to_string(), "1".to_string()),
            ])),
            // What start.sh needs to fence the network (NET_ADMIN) and become the services' user
            // with nothing left (SETUID, SETGID, SETPCAP), and what root's whole-home work needs
            // to read, write and own every bot's folder (CHOWN, DAC_OVERRIDE, DAC_READ_SEARCH,
            // FOWNER). A process started as a bot or as the services' user holds none of them
            // and, with no-new-privileges, never can.
            cap_drop: Some(vec!["ALL".into()]),
            cap_add: Some(["NET_ADMIN", "SETUID", "SETGID", "SETPCAP", "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER"].map(String::from).to_vec()),
            security_opt: Some(vec!["no-new-privileges".into()]),
            memory: Some(r.memory_bytes as i64),
            memory_swap: Some(r.memory_bytes as i64),
            nano_cpus: Some(r.nano_cpus),
            pids_limit: Some(r.pids),
            shm_size: Some(r.shm_bytes as i64),
            // A fresh /tmp on every start: no stale X locks, and the readiness marker belongs to this boot.
            tmpfs: Some(HashMap::from([("/tmp".to_string(), "rw,exec,nosuid,size=512m,mode=1777".to_string())])),
            port_bindings: Some(HashMap::from([(
                GATEWAY_PORT.to_string(),
                Some(vec![PortBinding { host_ip: Some("127.0.0.1".into()), host_port: Some(String::new()) }]),
            )])),
            ..Default::default()
        }),
        ..Default::default()
    }
}
