//! The container spec and the image's start script, checked on the real engine.

mod common;
use botdesk_core::{CallCtx, ComputerId, ComputerProvider, ComputerRef, ComputerScope, ComputerSpec, Resources};
use common::docker_provider;
use std::process::Command;

fn inspect(id: &str, format: &str) -> String {
    let out = Command::new("docker").args(["inspect", "--format", format, id]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_is_labelled_locked_down_and_publishes_only_the_gateway_on_loopback() {
    let (provider, _cleanup) = docker_provider().await;
    let spec = ComputerSpec {
        id: ComputerId::new("spec-check"),
        name: "spec-check".into(),
        scope: ComputerScope::Team,
        home_volume: format!("{}-spec-check", provider.config().data_dir_label),
        resources: Resources::default(),
        host: botdesk_core::HostName::local(),
    };
    let p = provider.provision(&spec, &CallCtx::default()).await.unwrap();
    let id = &p.provider_ref;
    // The container's own process starts as root only to fence the network, then is the screen
    // services' user with no capability; bots' commands run as 1000 (below) with none either.
    assert_eq!(inspect(id, "{{.Config.User}}"), "0:0");
    assert_eq!(inspect(id, "{{json .HostConfig.CapDrop}}"), r#"["ALL"]"#);
    // Root's: the fence (NET_ADMIN), becoming the services or a bot (SETUID, SETGID, SETPCAP), and
    // the whole home's files (checkpoint, restore, owners).
    assert_eq!(inspect(id, "{{json .HostConfig.CapAdd}}"), r#"["NET_ADMIN","SETUID","SETGID","SETPCAP","CHOWN","DAC_OVERRIDE","DAC_READ_SEARCH","FOWNER"]"#);
    assert_eq!(inspect(id, "{{json .HostConfig.SecurityOpt}}"), r#"["no-new-privileges"]"#);
    assert_eq!(inspect(id, "{{.HostConfig.Memory}}"), (2u64 << 30).to_string());
    assert_eq!(inspect(id, "{{.HostConfig.NanoCpus}}"), "2000000000");
    assert_eq!(inspect(id, "{{.HostConfig.PidsLimit}}"), "2048");
    assert_eq!(inspect(id, "{{index .Config.Labels \"botdesk.managed\"}}"), "1");
    assert_eq!(inspect(id, "{{index .Config.Labels \"botdesk.computer\"}}"), "spec-check");
    assert_eq!(inspect(id, "{{index .Config.Labels \"botdesk.data-dir\"}}"), provider.config().data_dir_label);
    // Exactly one published port, the gateway, on 127.0.0.1 with a host port Docker picked.
    let ports = inspect(id, "{{json .NetworkSettings.Ports}}");
    let ports: serde_json::Value = serde_json::from_str(&ports).unwrap();
    let ports = ports.as_object().unwrap();
    assert_eq!(ports.keys().collect::<Vec<_>>(), ["7900/tcp"]);
    let bindings = ports["7900/tcp"].as_array().unwrap();
    assert!(!bindings.is_empty() && bindings.iter().all(|b| b["HostIp"] == "127.0.0.1"), "{bindings:?}");
    // The home is a volume labelled like the container (never a host folder), owned by the
    // workspace user; destroy removes it with the container.
    assert_eq!(inspect(id, "{{range .Mounts}}{{.Type}} {{.Name}} -> {{.Destination}}{{end}}"), format!("volume {} -> /home/botdesk", spec.home_volume));
    let label = Command::new("docker").args(["volume", "inspect", "-f", "{{index .Labels \"botdesk.computer\"}}", &spec.home_volume]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&label.stdout).trim(), "spec-check");
    let script =
        "id -u; stat -c %u .; touch made-here; grep -E '^Cap(Prm|Eff)' /proc/self/status; ps -o uid=,comm= -C Xvfb -C fluxbox -C botdesk-gateway | sort -u";
    let (exit, out, _) =
        botdesk_core::exec_collect(&*provider, &ComputerRef::from(&spec), botdesk_core::ExecRequest::new(["sh", "-c", script]), &CallCtx::default())
            .await
            .unwrap();
    assert_eq!(exit.code, 0);
    let out = String::from_utf8_lossy(&out);
    assert!(out.starts_with("1000\n1000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n"), "{out}");
    // The screen services (X, its window manager, the gateway) run as botdesk-screen, none as root.
    let services: Vec<&str> = out.lines().skip(4).map(str::trim).collect();
    assert_eq!(services, ["990 Xvfb", "990 botdesk-gateway", "990 fluxbox"], "{out}");
    provider.destroy(&ComputerRef::from(&spec), &CallCtx::default()).await.unwrap();
    assert!(provider.list_volumes(None).await.unwrap().is_empty(), "destroy removes the home volume");
}

#[tokio::test]
async fn start_script_fails_loudly_when_x_never_answers() {
    let (_provider, _cleanup) = docker_provider().await;
    // Without the capability to fence its network, a computer does not start, and says why.
    let out = Command::new("docker")
        .args(["run", "--rm", "--label", "botdesk.managed=1"])
        .args(std::env::var("BOTDESK_TEST_RUN").map(|r| vec!["--label".to_string(), format!("botdesk.test-run={r}")]).unwrap_or_default())
        .arg(botdesk_docker::image::image_tag())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot fence the network (the computer needs NET_ADMIN)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A 1 MiB /dev/shm: Xvfb cannot write its framebuffer there, so X never answers.
    let out = Command::new("docker")
        .args(["run", "--rm", "--shm-size", "1m", "--cap-add", "NET_ADMIN", "--label", "botdesk.managed=1"])
        .args(std::env::var("BOTDESK_TEST_RUN").map(|r| vec!["--label".to_string(), format!("botdesk.test-run={r}")]).unwrap_or_default())
        .arg(botdesk_docker::image::image_tag())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert!(err.contains("X display :1 did not answer"), "{err}");
    assert!(err.contains("last lines of its log"), "{err}");
}
