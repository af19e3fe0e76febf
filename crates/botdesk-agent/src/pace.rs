//! Pacing by the rate limits a provider announces with every answer, so a run waits the time
//! the provider said instead of retrying blindly into 429s.
//!
//! Anthropic (rate limits docs, "Response headers"): `anthropic-ratelimit-requests-remaining` and
//! `-requests-reset`, and the same for `-tokens-`, `-input-tokens-` and `-output-tokens-`; resets
//! are RFC 3339 times. OpenAI (rate limits guide, "Rate limits in headers"):
//! `x-ratelimit-remaining-requests`, `x-ratelimit-reset-requests`, and the same for `-tokens`;
//! resets are durations such as `1s`, `6m0s` or `20ms`. Both send `retry-after` with a 429.
//!
//! What one client learns is kept for every client of the same endpoint and key in this
//! process: bots sharing a key share its limits.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// What a provider last said of a limit: how much is left, and when it is whole again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Left {
    pub remaining: u64,
    pub reset: SystemTime,
}

/// The limits a provider announced in one answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub requests: Option<Left>,
    /// The tightest token limit (input tokens, or all tokens).
    pub tokens: Option<Left>,
}

impl Limits {
    /// Reads the rate-limit headers of either vendor (`now` resolves OpenAI's relative resets).
    pub fn read(headers: &reqwest::header::HeaderMap, now: SystemTime) -> Limits {
        let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
        let count = |name: &str| get(name).and_then(|v| v.parse::<u64>().ok());
        let anthropic = |what: &str| -> Option<Left> {
            let remaining = count(&format!("anthropic-ratelimit-{what}-remaining"))?;
            let reset = rfc3339(get(&format!("anthropic-ratelimit-{what}-reset"))?)?;
            Some(Left { remaining, reset })
        };
        let openai = |what: &str| -> Option<Left> {
            let remaining = count(&format!("x-ratelimit-remaining-{what}"))?;
            let reset = now + duration(get(&format!("x-ratelimit-reset-{what}"))?)?;
            Some(Left { remaining, reset })
        };
        let tightest = |a: Option<Left>, b: Option<Left>| match (a, b) {
            (Some(x), Some(y)) => Some(if y.remaining < x.remaining { y } else { x }),
            (x, y) => x.or(y),
        };
        let tokens = tightest(tightest(anthropic("tokens"), anthropic("input-tokens")), openai("tokens"));
        Limits { requests: anthropic("requests").or_else(|| openai("requests")), tokens }
    }

    /// How long a request of about `tokens` prompt tokens must wait before it is sent, if at all.
    pub fn wait_for(&self, tokens: u64, now: SystemTime) -> Option<Duration> {
        let until = |l: Option<Left>, short: bool| l.filter(|_| short).and_then(|l| l.reset.duration_since(now).ok());
        let requests = until(self.requests, self.requests.is_some_and(|l| l.remaining == 0));
        let tokens = until(self.tokens, self.tokens.is_some_and(|l| l.remaining < tokens));
        requests.into_iter().chain(tokens).max().filter(|d| !d.is_zero())
    }

    /// When a 429 without `retry-after` may be tried again: when the exhausted limit resets.
    pub fn reset_after(&self, now: SystemTime) -> Option<Duration> {
        [self.requests, self.tokens].into_iter().flatten().filter(|l| l.remaining == 0).filter_map(|l| l.reset.duration_since(now).ok()).max()
    }

    pub fn is_empty(&self) -> bool {
        self.requests.is_none() && self.tokens.is_none()
    }
}

/// The limits last announced for each endpoint and key (by a hash of the two).
static KNOWN: std::sync::LazyLock<Mutex<HashMap<u64, Limits>>> = std::sync::LazyLock::new(Default::default);

pub fn key(endpoint: &str, api_key: Option<&str>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (endpoint, api_key).hash(&mut h);
    h.finish()
}

pub fn known(key: u64) -> Limits {
    KNOWN.lock().unwrap().get(&key).copied().unwrap_or_default()
}

pub fn learn(key: u64, limits: Limits) {
    if !limits.is_empty() {
        KNOWN.lock().unwrap().insert(key, limits);
    }
}

/// `2026-12-04T13:24:15Z`, with optional fractions of a second and a `±HH:MM` offset.
fn rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d, h, mi, sec) = (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut nanos = 0u32;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        let f = &frac[..digits];
        nanos = format!("{:0<9}", &f[..f.len().min(9)]).parse().ok()?;
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) && &o[3..4] == ":" => {
            let v = o[1..3].parse::<i64>().ok()? * 3600 + o[4..6].parse::<i64>().ok()? * 60;
            if o.starts_with('-') {
                -v
            } else {
                v
            }
        }
        _ => return None,
    };
    let days = botdesk_core::civil::days_from_civil(y, mo, d);
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset;
    let t = SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(u64::try_from(secs).ok()?))?;
    t.checked_add(Duration::from_nanos(nanos as u64))
}

/// OpenAI's reset durations: `20ms`, `1s`, `1.5s`, `6m0s`, `1h2m3s`.
fn duration(s: &str) -> Option<Duration> {
    let mut total = Duration::ZERO;
    let mut rest = s;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(|c| c.is_ascii_digit() || *c == b'.').count();
        let value: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let scale = match &rest[..unit] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit..];
        total += Duration::try_from_secs_f64(value * scale).ok()?;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderValue};

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn times_and_durations_read_as_the_vendors_write_them() {
        let t = |s| rfc3339(s).map(|t| t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis());
        assert_eq!(t("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(t("2026-12-04T13:24:15Z"), Some(1_796_390_655_000));
        assert_eq!(t("2026-12-04T13:24:15.250Z"), Some(1_796_390_655_250));
        assert_eq!(t("2026-12-04T14:24:15+01:00"), Some(1_796_390_655_000));
        for bad in ["", "soon", "2026-13-01T00:00:00Z", "2026-12-04 13:24", "2026-12-04T13:24:15"] {
            assert_eq!(t(bad), None, "{bad:?}");
        }
        assert_eq!(duration("20ms"), Some(Duration::from_millis(20)));
        assert_eq!(duration("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(duration("1h2m3.5s"), Some(Duration::from_millis(3_723_500)));
        assert_eq!(duration("forever"), None);
    }

    #[test]
    fn a_run_waits_for_the_limit_it_would_pass() {
        let now = rfc3339("2026-12-04T13:00:00Z").unwrap();
        let a = Limits::read(
            &headers(&[
                ("anthropic-ratelimit-requests-remaining", "10"),
                ("anthropic-ratelimit-requests-reset", "2026-12-04T13:00:30Z"),
                ("anthropic-ratelimit-input-tokens-remaining", "3000"),
                ("anthropic-ratelimit-input-tokens-reset", "2026-12-04T13:00:12Z"),
                ("anthropic-ratelimit-tokens-remaining", "9000"),
                ("anthropic-ratelimit-tokens-reset", "2026-12-04T13:00:40Z"),
            ]),
            now,
        );
        assert_eq!(a.tokens.unwrap().remaining, 3000, "the tightest");
        assert_eq!(a.wait_for(2000, now), None);
        assert_eq!(a.wait_for(5000, now), Some(Duration::from_secs(12)));
        let o = Limits::read(&headers(&[("x-ratelimit-remaining-requests", "0"), ("x-ratelimit-reset-requests", "1m30s")]), now);
        assert_eq!(o.wait_for(1, now), Some(Duration::from_secs(90)));
        assert_eq!(o.reset_after(now), Some(Duration::from_secs(90)));
        assert!(Limits::read(&headers(&[("x-ratelimit-remaining-requests", "many")]), now).is_empty());
    }
}
