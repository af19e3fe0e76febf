//! `cargo xtask bundle`: the `.deb` people install.

use super::*;

/// What the package recommends beside what its programs link: the engine its computers run on,
/// debootstrap (the base image where none can be pulled), a Secret Service for the keys, and
/// ffmpeg (a run's replay decodes its recording, and its videos are made, on this machine).
pub(crate) const DEB_RECOMMENDS: &str = "docker.io | docker-ce, debootstrap, gnome-keyring | keepassxc, ffmpeg";

/// Makes `target/<profile>/bundle/deb/botdesk_<version>_<arch>.deb`: the app, the `botdesk` CLI,
/// the icons and a desktop entry, with `Depends` computed by `dpkg-shlibdeps` from the libraries
/// the two programs link (WebKitGTK among them), so `apt-get install ./botdesk_*.deb` pulls them.
/// The programs need nothing else from this tree: the UI and the computer image's recipe are
/// compiled into them. `--debug` packages the test build (stripped), which the package test
/// installs; the release package is what people get.
pub(crate) fn bundle(args: &[String]) -> Result<PathBuf> {
    let debug = args.iter().any(|a| a == "--debug");
    if let Some(other) = args.iter().find(|a| *a != "--debug") {
        return Err(format!("bundle takes only --debug, not {other:?}"));
    }
    install_packages(false)?;
    build_ui()?;
    let profile = if debug { "debug" } else { "release" };
    say(&format!("building the app and the CLI ({profile})"));
    let mut build = cargo();
    build.args(["build", "-p", "botdesk-app", "-p", "botdesk-cli"]);
    if !debug {
        build.arg("--release");
    }
    status(&mut build)?;
    make_deb(&root().join("target").join(profile))
}

pub(crate) fn make_deb(out: &Path) -> Result<PathBuf> {
    let version = workspace_version()?;
    let arch = String::from_utf8_lossy(&Command::new("dpkg").arg("--print-architecture").output().map_err(|e| io("dpkg", e))?.stdout).trim().to_string();
    let bundle = out.join("bundle/deb");
    let tree = bundle.join(format!("botdesk_{version}_{arch}"));
    let _ = std::fs::remove_dir_all(&tree);
    // Where a file of the package goes (its folders made); modes are set once at the end.
    let place = |rel: &str| -> Result<PathBuf> {
        let p = tree.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).map_err(|e| io(rel, e))?;
        Ok(p)
    };
    // The programs, stripped of symbols (the release profile keeps them; a package need not).
    for bin in ["botdesk-app", "botdesk"] {
        let dest = place(&format!("usr/bin/{bin}"))?;
        status(Command::new("strip").arg("-o").arg(&dest).arg(out.join(bin)))?;
    }
    for (size, icon) in [("32x32", "32x32.png"), ("128x128", "128x128.png"), ("512x512", "icon.png")] {
        let dest = place(&format!("usr/share/icons/hicolor/{size}/apps/botdesk.png"))?;
        std::fs::copy(root().join("icons").join(icon), dest).map_err(|e| io(icon, e))?;
    }
    let entry = place("usr/share/applications/botdesk.desktop")?;
    std::fs::write(
        entry,
        "[Desktop Entry]\nType=Application\nName=Botdesk\nGenericName=AI bots on their own desktops\n\
         Comment=Run AI bots on your own laptop, each on its own Linux desktop\nExec=botdesk-app\nIcon=botdesk\n\
         Terminal=false\nCategories=Development;Utility;\nStartupWMClass=botdesk-app\n",
    )
    .map_err(|e| io("desktop entry", e))?;
    let copyright = place("usr/share/doc/botdesk/copyright")?;
    std::fs::write(copyright, "Botdesk\nLicense: MIT OR Apache-2.0\n").map_err(|e| io("copyright", e))?;
    // Depends: what the programs link, as Debian names it.
    let depends = shlib_depends(&[tree.join("usr/bin/botdesk-app"), tree.join("usr/bin/botdesk")])?;
    let size_kib = du_kib(&tree);
    let control = place("DEBIAN/control")?;
    std::fs::write(
        control,
        format!(
            "Package: botdesk\nVersion: {version}\nArchitecture: {arch}\nMaintainer: Botdesk developers <botdesk@localhost>\n\
             Installed-Size: {size_kib}\nDepends: {depends}\nRecommends: {DEB_RECOMMENDS}\nSection: utils\nPriority: optional\n\
             Description: Run AI bots on your own laptop, each on its own Linux desktop\n \
             Every bot gets its own X display, Chromium profile and workspace inside a Docker\n \
             container. Watch their screens, open their terminals and files, take control.\n \
             Includes the desktop app (botdesk-app) and the command line (botdesk).\n"
        ),
    )
    .map_err(|e| io("control", e))?;
    status(Command::new("chmod").args(["-R", "u=rwX,go=rX"]).arg(&tree))?;
    status(Command::new("chmod").arg("755").arg(tree.join("usr/bin/botdesk-app")).arg(tree.join("usr/bin/botdesk")))?;
    let deb = bundle.join(format!("botdesk_{version}_{arch}.deb"));
    // gzip: xz would take a minute over the test build for a few MB saved.
    status(Command::new("dpkg-deb").args(["--root-owner-group", "-Zgzip", "--build"]).arg(&tree).arg(&deb).stdout(Stdio::null()))?;
    Ok(deb)
}

pub(crate) fn workspace_version() -> Result<String> {
    let toml = std::fs::read_to_string(root().join("Cargo.toml")).map_err(|e| e.to_string())?;
    let after = toml.split("[workspace.package]").nth(1).ok_or("no [workspace.package] in Cargo.toml")?;
    after
        .lines()
        .find_map(|l| l.trim().strip_prefix("version").map(|v| v.trim().trim_start_matches('=').trim().trim_matches('"').to_string()))
        .ok_or_else(|| "no version in [workspace.package]".into())
}

/// `dpkg-shlibdeps` of the programs: it wants a `debian/control` where it runs.
pub(crate) fn shlib_depends(bins: &[PathBuf]) -> Result<String> {
    let dir = root().join("target/shlibdeps");
    std::fs::create_dir_all(dir.join("debian")).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("debian/control"), "Source: botdesk\n\nPackage: botdesk\nArchitecture: any\n").map_err(|e| e.to_string())?;
    let mut cmd = Command::new("dpkg-shlibdeps");
    cmd.arg("-O").current_dir(&dir);
    for b in bins {
        cmd.arg(format!("-e{}", b.display()));
    }
    let out = cmd.output().map_err(|e| format!("cannot run dpkg-shlibdeps (package dpkg-dev): {e}"))?;
    if !out.status.success() {
        return Err(format!("dpkg-shlibdeps failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("shlibs:Depends=").map(str::to_string))
        .ok_or_else(|| "dpkg-shlibdeps named no dependencies".into())
}

pub(crate) fn du_kib(dir: &Path) -> u64 {
    let out = Command::new("du").args(["-sk", "--apparent-size"]).arg(dir).output();
    out.ok().and_then(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().next().and_then(|n| n.parse().ok())).unwrap_or(0)
}
