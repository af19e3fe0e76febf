//! The tests' web site in a network namespace of its own, and the certificates of the remote
//! engine.

use super::*;

// The tests' web site (xtask/web/site.py): a network namespace of its own, joined to this one by a
// veth pair, with a private address (10.232.K.2, in a /24 of this run's) and one outside every
// private range (198.51.100.2, of the documentation range TEST-NET-2), serving port 8080 as the
// test user. What a bot's network policy refuses or lets through is reached there and nowhere
// else. Tests find it in BOTDESK_TEST_SITE and BOTDESK_TEST_SITE_PUBLIC.

pub(crate) struct TestSite {
    netns: String,
    veth: String,
    child: Option<Child>,
}

impl TestSite {
    pub(crate) fn start(envs: &mut Vec<(String, String)>, as_user: &[String]) -> Result<TestSite> {
        if !is_root() {
            return Err("the network tests serve their site in a network namespace: run `cargo xtask test` as root".into());
        }
        let pid = std::process::id();
        let k = pid % 250 + 1;
        let (here, there) = (format!("10.232.{k}.1"), format!("10.232.{k}.2"));
        let (public_here, public_there) = ("198.51.100.1", "198.51.100.2");
        let mut site = TestSite { netns: format!("botdesk-site-{pid}"), veth: format!("bds{}", pid % 100_000), child: None };
        say(&format!("serving the tests' web site at http://{there}:8080 and http://{public_there}:8080 (network namespace {})", site.netns));
        joined_netns(&site.netns, &site.veth, &[(here.as_str(), there.as_str()), (public_here, public_there)])?;
        let mut serve = Command::new("nsenter");
        serve.arg(format!("--net=/run/netns/{}", site.netns)).args(as_user).arg("python3").arg(root().join("xtask/web/site.py")).arg("8080");
        site.child = Some(serve.stdin(Stdio::null()).spawn().map_err(|e| format!("cannot start the tests' web site: {e}"))?);
        let deadline = Instant::now() + Duration::from_secs(20);
        let addr: std::net::SocketAddr = format!("{there}:8080").parse().map_err(|e| format!("{e}"))?;
        while std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err() {
            if Instant::now() > deadline {
                return Err("the tests' web site did not answer within 20 s".into());
            }
            sleep(Duration::from_millis(100));
        }
        envs.push(("BOTDESK_TEST_SITE".into(), there));
        envs.push(("BOTDESK_TEST_SITE_PUBLIC".into(), public_there.into()));
        Ok(site)
    }
}

impl Drop for TestSite {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // The server runs as the test user under runuser: whatever is left in the namespace goes.
        let _ = Command::new("ip").args(["netns", "pids", &self.netns]).output().map(|o| {
            for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                let _ = Command::new("kill").arg(pid).status();
            }
        });
        let _ = Command::new("ip").args(["link", "del", &self.veth]).stderr(Stdio::null()).status();
        let _ = Command::new("ip").args(["netns", "del", &self.netns]).stderr(Stdio::null()).status();
    }
}

/// Makes the network namespace `netns`, joined to this one by a veth pair (`veth` here, `veth`p
/// there) whose ends get the /24 addresses of each (here, there) pair; both ends and its loopback up.
pub(crate) fn joined_netns(netns: &str, veth: &str, addresses: &[(&str, &str)]) -> Result {
    let ip = |args: &[&str]| status(Command::new("ip").args(args));
    let inside = |args: &[&str]| status(Command::new("nsenter").arg(format!("--net=/run/netns/{netns}")).args(args));
    let peer = format!("{veth}p");
    ip(&["netns", "add", netns])?;
    ip(&["link", "add", veth, "type", "veth", "peer", "name", &peer])?;
    ip(&["link", "set", &peer, "netns", netns])?;
    for (here, there) in addresses {
        ip(&["addr", "add", &format!("{here}/24"), "dev", veth])?;
        inside(&["ip", "addr", "add", &format!("{there}/24"), "dev", &peer])?;
    }
    ip(&["link", "set", veth, "up"])?;
    inside(&["ip", "link", "set", &peer, "up"])?;
    inside(&["ip", "link", "set", "lo", "up"])
}

/// A test CA with a server certificate for `address` (in `server`) and, in `clients`: `good/`
/// (that CA and a client certificate it signed), `wrong-ca/` (another CA, so the server is not
/// trusted) and `wrong-client/` (a client certificate of another CA, which the server refuses).
pub(crate) fn make_certificates(server: &Path, clients: &Path, address: &str) -> Result {
    let openssl = |dir: &Path, args: &[&str]| status(Command::new("openssl").current_dir(dir).args(args).stderr(Stdio::null()));
    let ca = |dir: &Path, name: &str| {
        openssl(
            dir,
            &["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca-key.pem", "-out", "ca.pem", "-days", "2", "-subj", &format!("/CN={name}")],
        )
    };
    let sign = |dir: &Path, ca_dir: &Path, key: &str, cert: &str, subject: &str, ext: &str| -> Result {
        std::fs::write(dir.join("ext.cnf"), ext).map_err(|e| e.to_string())?;
        openssl(dir, &["req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", "req.csr", "-subj", subject])?;
        let (ca_cert, ca_key) = (ca_dir.join("ca.pem"), ca_dir.join("ca-key.pem"));
        status(
            Command::new("openssl")
                .current_dir(dir)
                .args(["x509", "-req", "-in", "req.csr", "-CA"])
                .arg(&ca_cert)
                .arg("-CAkey")
                .arg(&ca_key)
                .args(["-CAcreateserial", "-out", cert, "-days", "2", "-extfile", "ext.cnf"])
                .stderr(Stdio::null()),
        )
    };
    let (good, wrong_ca, wrong_client, other) = (clients.join("good"), clients.join("wrong-ca"), clients.join("wrong-client"), clients.join("other-ca"));
    for d in [&good, &wrong_ca, &wrong_client, &other] {
        std::fs::create_dir_all(d).map_err(|e| e.to_string())?;
    }
    ca(server, "botdesk test CA")?;
    sign(
        server,
        server,
        "server-key.pem",
        "server-cert.pem",
        &format!("/CN={address}"),
        // 127.0.0.1 too: a test reaches it through a relay of its own that it can cut.
        &format!("subjectAltName=IP:{address},IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
    )?;
    sign(&good, server, "key.pem", "cert.pem", "/CN=botdesk test client", "extendedKeyUsage=clientAuth\n")?;
    std::fs::copy(server.join("ca.pem"), good.join("ca.pem")).map_err(|e| e.to_string())?;
    ca(&other, "another CA")?;
    sign(&wrong_client, &other, "key.pem", "cert.pem", "/CN=a stranger", "extendedKeyUsage=clientAuth\n")?;
    std::fs::copy(server.join("ca.pem"), wrong_client.join("ca.pem")).map_err(|e| e.to_string())?;
    std::fs::copy(other.join("ca.pem"), wrong_ca.join("ca.pem")).map_err(|e| e.to_string())?;
    for f in ["cert.pem", "key.pem"] {
        std::fs::copy(good.join(f), wrong_ca.join(f)).map_err(|e| e.to_string())?;
    }
    // The other CA's key is no one's business after signing.
    std::fs::remove_dir_all(&other).map_err(|e| e.to_string())?;
    Ok(())
}
