//! Random interleavings of claim / renew / release / expire / take control / reserve over several
//! bots and fences, checked against a model of what every client believes it holds:
//! - never two live execution holders for one (computer, bot);
//! - never input authorised to a bot whose control lease another holds (or to anyone without one);
//! - an older fence never releases (or renews) a newer lease.

use botdesk_core::*;
use botdesk_store::*;
use proptest::prelude::*;

const TTL: i64 = 1_000;
const CTL: i64 = 3_000;
const BOTS: usize = 3;

#[derive(Debug, Clone)]
enum Op {
    Claim(usize),
    Renew(usize),
    Release(usize),
    Advance(i64),
    TakeControl(usize),
    ReleaseControl,
    Authorize(usize, bool),
    Reserve,
    FinishReservation,
    StopBot(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..BOTS).prop_map(Op::Claim),
        3 => (0..8usize).prop_map(Op::Renew),
        3 => (0..8usize).prop_map(Op::Release),
        3 => (1..1_500i64).prop_map(Op::Advance),
        2 => (0..BOTS).prop_map(Op::TakeControl),
        1 => Just(Op::ReleaseControl),
        2 => ((0..BOTS), any::<bool>()).prop_map(|(b, own)| Op::Authorize(b, own)),
        1 => Just(Op::Reserve),
        1 => Just(Op::FinishReservation),
        1 => (0..BOTS).prop_map(Op::StopBot),
    ]
}

/// What the clients believe: every lease handle ever returned, and which one each bot's model says is live.
#[derive(Default)]
struct Model {
    handles: Vec<ExecLease>,
    live: [Option<(i64, i64)>; BOTS], // (fence, expires_at)
    newest_fence: [i64; BOTS],
    control: Option<(usize, String, i64)>, // (bot, lease id, expires_at)
    reservation: Option<String>,
}

async fn run_case(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&dir.path().join("p.db")).await.unwrap();
    let mut bots = vec![];
    let mut computer = None;
    for i in 0..BOTS {
        let name = format!("bot{i}");
        let (b, c) = s
            .create_bot(NewBot { name: &name, scope: ComputerScope::Team, model: None, instructions: "", provider: "fake", host: HostName::local() }, 0)
            .await
            .unwrap();
        bots.push(b.id);
        computer = Some(c.id);
    }
    let c = computer.unwrap();
    let mut now = 1i64;
    let mut m = Model::default();
    let idx = |bot: &BotId, bots: &[BotId]| bots.iter().position(|b| b == bot).unwrap();

    for op in ops {
        match op {
            Op::Claim(b) => match s.claim_execution(&c, &bots[b], &format!("h{}", m.handles.len()), now, TTL).await {
                Ok(l) => {
                    // Never two live holders: the model must not think anyone still holds it.
                    assert!(m.live[b].is_none_or(|(_, exp)| exp <= now), "claim succeeded while fence {:?} was live", m.live[b]);
                    assert!(m.reservation.is_none(), "claim succeeded on a reserved computer");
                    assert!(m.control.as_ref().is_none_or(|(cb, _, exp)| *cb != b || *exp <= now), "a run claimed a screen the person controls");
                    assert!(l.fence > m.newest_fence[b], "fences must grow");
                    m.newest_fence[b] = l.fence;
                    m.live[b] = Some((l.fence, l.expires_at));
                    m.handles.push(l);
                }
                Err(StoreError::Busy(_)) => {
                    let controlled = m.control.as_ref().is_some_and(|(cb, _, exp)| *cb == b && *exp > now);
                    assert!(m.reservation.is_some() || controlled || m.live[b].is_some_and(|(_, exp)| exp > now), "refused a free lease");
                }
                Err(e) => panic!("claim: {e}"),
            },
            Op::Renew(h) => {
                let Some(handle) = m.handles.get(h).cloned() else { continue };
                let b = idx(&handle.bot_id, &bots);
                let is_live = m.live[b].is_some_and(|(f, exp)| f == handle.fence && exp > now);
                match s.renew_execution(&handle, now, TTL).await {
                    Ok(l) => {
                        assert!(is_live, "an older or expired fence {} renewed", handle.fence);
                        m.live[b] = Some((l.fence, l.expires_at));
                    }
                    Err(StoreError::Stale(_)) => assert!(!is_live, "a live lease could not be renewed"),
                    Err(e) => panic!("renew: {e}"),
                }
            }
            Op::Release(h) => {
                let Some(handle) = m.handles.get(h).cloned() else { continue };
                let b = idx(&handle.bot_id, &bots);
                let holds = m.live[b].is_some_and(|(f, _)| f == handle.fence);
                match s.release_execution(&handle).await {
                    Ok(()) => {
                        assert!(holds, "fence {} released a newer lease", handle.fence);
                        m.live[b] = None;
                    }
                    Err(StoreError::Stale(_)) => assert!(!holds || handle.fence < m.newest_fence[b], "could not release its own lease"),
                    Err(e) => panic!("release: {e}"),
                }
            }
            Op::Advance(ms) => now += ms,
            Op::TakeControl(b) => match s.take_control(&c, &bots[b], now, CTL).await {
                Ok(l) => {
                    assert!(m.reservation.is_none());
                    assert!(m.live[b].is_none_or(|(_, exp)| exp <= now), "control granted while the bot holds a live lease");
                    if let Some((ob, _, exp)) = &m.control {
                        assert!(*exp <= now || *ob == b, "control granted while another screen was controlled");
                    }
                    m.control = Some((b, l.lease_id, l.expires_at));
                }
                Err(StoreError::Busy(_) | StoreError::BotRunning(_)) => {}
                Err(e) => panic!("take control: {e}"),
            },
            Op::ReleaseControl => {
                if let Some((b, id, _)) = m.control.take() {
                    let r = s.release_control(&c, &id, TakeoverResult::Finished, None, now).await;
                    // An expired lease may already be gone; a live one must release.
                    assert!(r.is_ok() || matches!(r, Err(StoreError::Stale(_))), "release control of bot {b}: {r:?}");
                }
            }
            Op::Authorize(b, own) => {
                let id = match (&m.control, own) {
                    (Some((_, id, _)), true) => id.clone(),
                    _ => "ctl-not-a-lease".to_string(),
                };
                let ok = s.authorize_input(&c, &bots[b], &id, now).await.is_ok();
                let expected = m.control.as_ref().is_some_and(|(cb, cid, exp)| *cb == b && *cid == id && *exp > now);
                assert_eq!(ok, expected, "input to bot {b} with lease {id}: authorised {ok}, model says {expected}");
            }
            Op::Reserve => match s.reserve(&c, ReservationAction::Update, 1, "boot", now).await {
                Ok(r) => {
                    assert!(m.reservation.is_none());
                    assert!(m.live.iter().all(|l| l.is_none_or(|(_, exp)| exp <= now)), "reserved while a lease was live");
                    assert!(m.control.as_ref().is_none_or(|(_, _, exp)| *exp <= now), "reserved while a screen was controlled");
                    m.reservation = Some(r.id);
                }
                Err(StoreError::Busy(_)) => {}
                Err(e) => panic!("reserve: {e}"),
            },
            Op::FinishReservation => {
                if let Some(id) = m.reservation.take() {
                    s.finish_reservation(&id, ReservationStatus::Completed, None, now).await.unwrap();
                }
            }
            Op::StopBot(b) => {
                s.end_bot_leases(&bots[b]).await.unwrap();
                m.live[b] = None;
            }
        }
        // The database agrees with the model about every bot's live holder.
        for (b, bot) in bots.iter().enumerate() {
            let db = s.live_execution(&c, bot, now).await.unwrap().map(|l| l.fence);
            let model = m.live[b].filter(|(_, exp)| *exp > now).map(|(f, _)| f);
            assert_eq!(db, model, "bot {b} at {now}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn leases_hold_their_invariants_under_random_interleavings(ops in prop::collection::vec(op(), 1..60)) {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(run_case(ops));
    }
}
