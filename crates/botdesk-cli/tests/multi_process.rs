//! Two separate `botdesk` processes contend for the same bot on one data directory: exactly one
//! drives, the other gets Busy; SIGKILL of the winner lets the loser reclaim after expiry with
//! fence + 1. Time is an input: the loser's clock runs 301 s ahead (`BOTDESK_CLOCK_OFFSET_MS`)
//! instead of the test waiting out the 5-minute lease.

use serde_json::Value;
use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

const BIN: &str = env!("CARGO_BIN_EXE_botdesk");

fn botdesk(dir: &std::path::Path) -> Command {
    let mut c = Command::new(BIN);
    c.arg("--data-dir").arg(dir);
    c
}

#[test]
fn two_processes_one_driver_and_reclaim_after_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    assert!(botdesk(dir.path()).args(["bot", "create", "contested"]).output().unwrap().status.success());

    // Both start at once; exactly one may print a lease.
    let spawn = || botdesk(dir.path()).args(["lease", "hold", "contested", "--ms", "600000"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut a = spawn();
    let mut b = spawn();
    let first_line = |child: &mut std::process::Child| -> Option<Value> {
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).ok()?;
        serde_json::from_str(&line).ok()
    };
    // The loser exits quickly with Busy; the winner prints its lease and keeps heartbeating.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut winner, loser_out) = loop {
        if let Some(st) = a.try_wait().unwrap() {
            break (b, (st, a.wait_with_output().unwrap()));
        }
        if let Some(st) = b.try_wait().unwrap() {
            break (a, (st, b.wait_with_output().unwrap()));
        }
        assert!(Instant::now() < deadline, "neither process was refused: both drive the bot");
        std::thread::sleep(Duration::from_millis(20));
    };
    let (status, out) = loser_out;
    assert_eq!(status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim(), "botdesk: the bot is busy: another run holds its execution lease");
    let lease = first_line(&mut winner).expect("the winner prints its lease");
    assert_eq!(lease["fence"], 1);
    assert!(winner.try_wait().unwrap().is_none(), "the winner keeps driving");

    // A third process now is refused too, and so is Take control.
    let out = botdesk(dir.path()).args(["lease", "hold", "contested", "--ms", "10"]).output().unwrap();
    assert!(!out.status.success());
    let out = botdesk(dir.path()).args(["control", "take", "contested"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim(), "botdesk: Stop the bot first");

    // SIGKILL the winner: nothing releases its lease.
    winner.kill().unwrap(); // SIGKILL on Unix
    winner.wait().unwrap();
    let out = botdesk(dir.path()).args(["lease", "hold", "contested", "--ms", "10"]).output().unwrap();
    assert!(!out.status.success(), "the dead winner's lease is still live until it expires");

    // After expiry (the loser's clock is 301 s later) it reclaims with fence + 1.
    let out = botdesk(dir.path()).args(["lease", "hold", "contested", "--ms", "10"]).env("BOTDESK_CLOCK_OFFSET_MS", "301000").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let reclaimed: Value = serde_json::from_slice(out.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(reclaimed["fence"], 2);
    assert_eq!(reclaimed["screen_lease"], format!("{}:2", reclaimed["run_id"].as_str().unwrap()));
}
