//! `botdesk host`: Docker engines on other machines, against a real second engine that `cargo
//! xtask test` starts in a network namespace of its own, reached over TCP with mutual TLS.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_botdesk");

/// The second engine's address and the folder of test certificates (see xtask's RemoteEngine).
fn remote() -> (String, PathBuf) {
    let url = std::env::var("BOTDESK_TEST_REMOTE_URL")
        .expect("BOTDESK_TEST_REMOTE_URL is unset: run the tests with `cargo xtask test`, which starts a second Docker engine");
    let tls = std::env::var("BOTDESK_TEST_REMOTE_TLS").expect("BOTDESK_TEST_REMOTE_TLS is unset: run the tests with `cargo xtask test`");
    (url, PathBuf::from(tls))
}

fn botdesk(data: &Path, args: &[&str]) -> Output {
    Command::new(BIN).arg("--data-dir").arg(data).args(args).output().unwrap()
}

fn json(data: &Path, args: &[&str]) -> Value {
    let out = botdesk(data, &[&["--json"], args].concat());
    assert!(out.status.success(), "botdesk {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Fails with exactly one line on stderr, naming the host; returns it.
fn refused(data: &Path, args: &[&str], host: &str) -> String {
    let out = botdesk(data, args);
    assert_eq!(out.status.code(), Some(1), "botdesk {args:?} should fail");
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains(&format!("host {host}")), "names the host: {err}");
    err
}

#[test]
fn a_host_on_another_machine_is_added_checked_listed_and_removed() {
    let (url, tls) = remote();
    let data = tempfile::tempdir().unwrap();
    let d = data.path();
    let good = tls.join("good");
    let good = good.to_str().unwrap();

    // Added only once it answered, with what its engine said of itself.
    let added = json(d, &["host", "add", "far", &url, "--tls-dir", good]);
    assert_eq!(added["host"]["name"], "far");
    assert!(added["engine"].as_str().unwrap().starts_with("Docker "), "{added}");
    let hosts = json(d, &["host", "ls"]);
    let names: Vec<&str> = hosts["hosts"].as_array().unwrap().iter().map(|h| h["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["local", "far"]);
    assert_eq!(hosts["hosts"][1]["url"], url.as_str());
    assert_eq!(hosts["hosts"][1]["tls_dir"], good);

    // The computer image goes there as one stream, with its progress; the host then has it (it
    // never pulled it from anywhere), and a second send finds it there.
    let out = botdesk(d, &["--json", "image", "send", "far"]);
    assert!(out.status.success(), "image send: {}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let (last, progress) = lines.split_last().unwrap();
    assert_eq!(last["sent"], true, "{last}");
    let tag = last["image"].as_str().unwrap().to_string();
    let sent: Vec<u64> = progress.iter().filter(|p| p["progress"]["stage"] == "send").map(|p| p["progress"]["sent"].as_u64().unwrap()).collect();
    assert!(sent.len() > 10 && sent.windows(2).all(|w| w[0] < w[1]), "progress as it goes: {} reports", sent.len());
    assert!(*sent.last().unwrap() > 100 << 20, "the whole image went: {} bytes", sent.last().unwrap());
    let inspect = Command::new("docker")
        .args(["--tlsverify", "-H", &url])
        .arg("--tlscacert")
        .arg(Path::new(good).join("ca.pem"))
        .arg("--tlscert")
        .arg(Path::new(good).join("cert.pem"))
        .arg("--tlskey")
        .arg(Path::new(good).join("key.pem"))
        .args(["image", "inspect", "--format", "{{.Id}}", &tag])
        .output()
        .unwrap();
    assert!(inspect.status.success(), "the host has {tag}: {}", String::from_utf8_lossy(&inspect.stderr));
    let again = json(d, &["image", "send", "far"]);
    assert_eq!(again["sent"], false, "{again}");
    assert!(String::from_utf8_lossy(&botdesk(d, &["image", "send", "nowhere"]).stderr).contains("not found"));

    // doctor checks it.
    let report: Value = serde_json::from_slice(&botdesk(d, &["--json", "doctor"]).stdout).unwrap();
    let far = report["checks"].as_array().unwrap().iter().find(|c| c["name"] == "host far").unwrap_or_else(|| panic!("no check of far: {report}"));
    assert_eq!(far["ok"], true, "{far}");
    assert!(far["detail"].as_str().unwrap().contains(&url), "{far}");

    // Each wrong set-up is one line naming the host and the fix, and nothing is added.
    let e = refused(d, &["host", "add", "untrusted", &url, "--tls-dir", tls.join("wrong-ca").to_str().unwrap()], "untrusted");
    assert!(e.contains("TLS handshake") && e.contains("signed by ca.pem"), "{e}");
    let e = refused(d, &["host", "add", "stranger", &url, "--tls-dir", tls.join("wrong-client").to_str().unwrap()], "stranger");
    assert!(e.contains("TLS handshake") && e.contains("trust cert.pem"), "{e}");
    let closed = url.rsplit_once(':').unwrap().0.to_string() + ":2399";
    let e = refused(d, &["host", "add", "closed", &closed, "--tls-dir", good], "closed");
    assert!(e.contains("nothing answers") && e.contains("--tlsverify"), "{e}");
    let e = refused(d, &["host", "add", "nowhere", "tcp://no-such-host.invalid:2376", "--tls-dir", good], "nowhere");
    assert!(e.contains("does not resolve"), "{e}");
    let e = refused(d, &["host", "add", "bare", &url, "--tls-dir", d.to_str().unwrap()], "bare");
    assert!(e.contains("ca.pem") && e.contains("--tls-dir"), "{e}");
    let e = refused(d, &["host", "add", "shell", "ssh://me@far", "--tls-dir", good], "shell");
    assert!(e.contains("use tcp://HOST:2376 with TLS"), "{e}");
    assert_eq!(json(d, &["host", "ls"])["hosts"].as_array().unwrap().len(), 2);
    let dup = botdesk(d, &["host", "add", "far", &url, "--tls-dir", good]);
    assert!(String::from_utf8_lossy(&dup.stderr).contains("already exists"));
    let local = botdesk(d, &["host", "add", "local", &url, "--tls-dir", good]);
    assert!(String::from_utf8_lossy(&local.stderr).contains("`local` is the Docker engine on this machine"));

    // A host whose certificates went away fails its check in doctor, with the fix.
    let moved = tempfile::tempdir().unwrap();
    for f in ["ca.pem", "cert.pem", "key.pem"] {
        std::fs::copy(Path::new(good).join(f), moved.path().join(f)).unwrap();
    }
    json(d, &["host", "add", "moving", &url, "--tls-dir", moved.path().to_str().unwrap()]);
    std::fs::remove_file(moved.path().join("key.pem")).unwrap();
    let out = botdesk(d, &["--json", "doctor"]);
    assert_eq!(out.status.code(), Some(1), "a failed check fails doctor");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let moving = report["checks"].as_array().unwrap().iter().find(|c| c["name"] == "host moving").unwrap();
    assert_eq!(moving["ok"], false);
    assert!(moving["detail"].as_str().unwrap().contains("key.pem") && moving["fix"].as_str().unwrap().contains("--tls-dir"), "{moving}");
    let text = String::from_utf8_lossy(&botdesk(d, &["doctor"]).stdout).to_string();
    assert!(text.lines().any(|l| l.starts_with("FAIL") && l.contains("host moving")), "{text}");

    // Removed, the host is gone; `local` stays.
    json(d, &["host", "rm", "moving"]);
    json(d, &["host", "rm", "far"]);
    assert_eq!(json(d, &["host", "ls"])["hosts"].as_array().unwrap().len(), 1);
    assert!(String::from_utf8_lossy(&botdesk(d, &["host", "rm", "local"]).stderr).contains("cannot be removed"));
    assert!(String::from_utf8_lossy(&botdesk(d, &["host", "rm", "far"]).stderr).contains("not found"));
}
