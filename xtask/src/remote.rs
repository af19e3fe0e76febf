//! A Docker engine on "another machine" for the tests and the bench.

use super::*;

// A Docker engine on "another machine": a second dockerd in a network namespace of its own (with
// a veth pair to this one), listening only on its own address with mutual TLS, with private
// `/home` and `/tmp` so nothing of this machine's can be bind-mounted by accident. It remaps
// users (`--userns-remap default`: dockerd adds the `dockremap` user and its subordinate ids), so
// the tests of other hosts also show that computers work under remapping. Everything is
// per run (names, subnet, folders), so two runs on one machine do not meet, and all of it goes
// when the tests end.

pub(crate) struct RemoteEngine {
    pub(crate) netns: String,
    pub(crate) veth: String,
    root: PathBuf,
    pidfile: PathBuf,
    child: Option<Child>,
}

impl RemoteEngine {
    /// Starts it and tells the tests where it is: `BOTDESK_TEST_REMOTE_URL`, and in
    /// `BOTDESK_TEST_REMOTE_TLS` a folder with `good/` (certificates it trusts), `wrong-ca/` (a CA
    /// that did not sign it) and `wrong-client/` (a client certificate it does not trust).
    pub(crate) fn start(envs: &mut Vec<(String, String)>, as_user: &[String]) -> Result<RemoteEngine> {
        if !is_root() {
            return Err("the tests of Docker hosts on other machines start a second dockerd in a network namespace: run `cargo xtask test` as root (the tests themselves run as an unprivileged user)".into());
        }
        let pid = std::process::id();
        let k = pid % 250 + 1;
        let (here, there) = (format!("10.231.{k}.1"), format!("10.231.{k}.2"));
        let mut e = RemoteEngine {
            netns: format!("botdesk-remote-{pid}"),
            veth: format!("bdr{}", pid % 100_000),
            // Outside /tmp and /home, which the engine sees as empty folders of its own.
            root: PathBuf::from(format!("/var/lib/botdesk-remote-{pid}")),
            pidfile: PathBuf::from(format!("/run/botdesk-remote-{pid}.pid")),
            child: None,
        };
        say(&format!("starting a second Docker engine at tcp://{there}:2376 (network namespace {})", e.netns));
        joined_netns(&e.netns, &e.veth, &[(here.as_str(), there.as_str())])?;
        status(Command::new("nsenter").arg(format!("--net=/run/netns/{}", e.netns)).args(["ip", "route", "add", "default", "via", &here]))?;
        // Certificates: the engine's (naming its address) under its root; the clients' where the
        // test user reads them.
        let server = e.root.join("tls");
        std::fs::create_dir_all(&server).map_err(|err| err.to_string())?;
        let clients = root().join("target/remote-tls");
        let _ = std::fs::remove_dir_all(&clients);
        make_certificates(&server, &clients, &there)?;
        user_dir("remote-tls", as_user)?;
        let script = format!(
            "mount -t tmpfs none /home && mount -t tmpfs none /tmp && exec dockerd --data-root {root}/data --exec-root {root}/exec \
             --userns-remap default --pidfile {pidfile} -H tcp://{there}:2376 --tlsverify --tlscacert {tls}/ca.pem --tlscert {tls}/server-cert.pem --tlskey {tls}/server-key.pem",
            root = e.root.display(),
            pidfile = e.pidfile.display(),
            tls = server.display(),
        );
        let log = std::fs::File::create(root().join("target/remote-dockerd.log")).map_err(|err| err.to_string())?;
        let child = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", e.netns))
            .args(["unshare", "-m", "--propagation", "private", "sh", "-c", &script])
            .stdout(log.try_clone().map_err(|err| err.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|err| format!("cannot start the second dockerd: {err}"))?;
        e.child = Some(child);
        let good = clients.join("good");
        let deadline = Instant::now() + Duration::from_secs(60);
        let url = format!("tcp://{there}:2376");
        while !quiet_ok(
            Command::new("docker")
                .args(["--tlsverify", "-H", &url])
                .arg("--tlscacert")
                .arg(good.join("ca.pem"))
                .arg("--tlscert")
                .arg(good.join("cert.pem"))
                .arg("--tlskey")
                .arg(good.join("key.pem"))
                .arg("version"),
        ) {
            if Instant::now() > deadline {
                return Err("the second dockerd did not answer within 60 s; see target/remote-dockerd.log".into());
            }
            sleep(Duration::from_millis(200));
        }
        envs.push(("BOTDESK_TEST_REMOTE_URL".into(), url));
        envs.push(("BOTDESK_TEST_REMOTE_TLS".into(), clients.display().to_string()));
        Ok(e)
    }
}

impl Drop for RemoteEngine {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(&self.pidfile) {
            let _ = Command::new("kill").arg(pid.trim()).status();
        }
        if let Some(mut c) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(30);
            while c.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("ip").args(["link", "del", &self.veth]).stderr(Stdio::null()).status();
        let _ = Command::new("ip").args(["netns", "del", &self.netns]).stderr(Stdio::null()).status();
        let _ = std::fs::remove_dir_all(&self.root);
        let _ = std::fs::remove_file(&self.pidfile);
    }
}
