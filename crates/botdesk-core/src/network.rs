//! A bot's network policy: where its commands and its browser may connect. The person sets it;
//! the computer enforces it where the bot cannot reach (the Docker provider's computer sends each
//! TCP connection of a bot through its screen services, see `botdesk_net.py` in the image).

use std::fmt;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

/// The most entries an `allow` list holds.
pub const MAX_ALLOW: usize = 256;

/// Where a bot may connect.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ts_rs::TS)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum NetPolicy {
    /// The internet: public addresses only, never this machine, the LAN, link-local and cloud
    /// metadata addresses, or other computers.
    #[default]
    Open,
    /// Nothing at all (no name server either).
    Offline,
    /// Only these domains (and their subdomains) and addresses, even private ones.
    Allow {
        #[ts(type = "Array<string>")]
        allow: Vec<NetTarget>,
    },
}

/// One entry of an allowlist.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum NetTarget {
    /// A domain, lower case, without a trailing dot; its subdomains are allowed too.
    Domain(String),
    /// An IPv4 address (`/32`) or network.
    Address { addr: Ipv4Addr, prefix: u8 },
}

impl NetTarget {
    /// `example.org`, `*.example.org` (the same), `10.0.0.5` or `10.0.0.0/24`.
    pub fn parse(s: &str) -> Result<NetTarget, String> {
        let s = s.trim();
        if let Some((addr, prefix)) = s.split_once('/') {
            let addr: Ipv4Addr = addr.parse().map_err(|_| format!("{s:?} is not an IPv4 network (a.b.c.d/n)"))?;
            let prefix: u8 = prefix.parse().ok().filter(|p| *p <= 32).ok_or_else(|| format!("{s:?}: the prefix is a number from 0 to 32"))?;
            let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - prefix) };
            return Ok(NetTarget::Address { addr: Ipv4Addr::from(u32::from(addr) & mask), prefix });
        }
        if let Ok(addr) = s.parse::<Ipv4Addr>() {
            return Ok(NetTarget::Address { addr, prefix: 32 });
        }
        if s.contains(':') {
            return Err(format!("{s:?}: IPv6 is off in computers; give a domain or an IPv4 address (a port is not part of an entry)"));
        }
        let domain = s.strip_prefix("*.").unwrap_or(s).trim_end_matches('.').to_ascii_lowercase();
        let label_ok =
            |l: &str| !l.is_empty() && l.len() <= 63 && !l.starts_with('-') && !l.ends_with('-') && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if domain.is_empty() || domain.len() > 253 || !domain.split('.').all(label_ok) {
            return Err(format!("{s:?} is not a domain (letters, digits and hyphens, in labels joined by dots) nor an IPv4 address"));
        }
        if domain.split('.').next_back().is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_digit())) {
            return Err(format!("{s:?} is not a domain nor an IPv4 address"));
        }
        Ok(NetTarget::Domain(domain))
    }
}

impl fmt::Display for NetTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetTarget::Domain(d) => f.write_str(d),
            NetTarget::Address { addr, prefix: 32 } => write!(f, "{addr}"),
            NetTarget::Address { addr, prefix } => write!(f, "{addr}/{prefix}"),
        }
    }
}

impl TryFrom<String> for NetTarget {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        NetTarget::parse(&s)
    }
}

impl From<NetTarget> for String {
    fn from(t: NetTarget) -> String {
        t.to_string()
    }
}

impl NetPolicy {
    /// From words: `open`, `offline`, or `allow` and its entries.
    pub fn from_words(words: &[String]) -> Result<NetPolicy, String> {
        match words.split_first() {
            Some((mode, rest)) if mode == "open" || mode == "offline" => {
                if !rest.is_empty() {
                    return Err(format!("`{mode}` takes no list (give `allow` and the domains or addresses)"));
                }
                Ok(if mode == "open" { NetPolicy::Open } else { NetPolicy::Offline })
            }
            Some((mode, rest)) if mode == "allow" => Self::allow(rest.iter().map(String::as_str)),
            _ => Err("a network policy is `open`, `offline`, or `allow` followed by domains or addresses".into()),
        }
    }

    /// `allow` with `entries` (at least one, at most [`MAX_ALLOW`], repeats dropped).
    pub fn allow<'a>(entries: impl IntoIterator<Item = &'a str>) -> Result<NetPolicy, String> {
        let mut allow: Vec<NetTarget> = vec![];
        for e in entries.into_iter().flat_map(|e| e.split([',', ' ', '\n'])).filter(|e| !e.trim().is_empty()) {
            let t = NetTarget::parse(e)?;
            if !allow.contains(&t) {
                allow.push(t);
            }
        }
        if allow.is_empty() {
            return Err("`allow` needs at least one domain or address (or choose `offline`)".into());
        }
        if allow.len() > MAX_ALLOW {
            return Err(format!("an allowlist holds at most {MAX_ALLOW} entries"));
        }
        Ok(NetPolicy::Allow { allow })
    }

    /// Checks a policy read from elsewhere (the store, a client).
    pub fn validate(&self) -> Result<(), String> {
        match self {
            NetPolicy::Allow { allow } if allow.is_empty() || allow.len() > MAX_ALLOW => Err(format!("an allowlist holds 1 to {MAX_ALLOW} entries")),
            _ => Ok(()),
        }
    }

    /// Its mode's word.
    pub fn mode(&self) -> &'static str {
        match self {
            NetPolicy::Open => "open",
            NetPolicy::Offline => "offline",
            NetPolicy::Allow { .. } => "allow",
        }
    }
}

impl fmt::Display for NetPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetPolicy::Open => f.write_str("open (the internet; never this machine, the LAN or other computers)"),
            NetPolicy::Offline => f.write_str("offline (no network at all)"),
            NetPolicy::Allow { allow } => write!(f, "allow {}", allow.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ")),
        }
    }
}

/// One bot's policy on its computer, by the uid it runs as there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BotNetwork {
    pub uid: u32,
    pub policy: NetPolicy,
}

/// A connection the policy refused.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct NetRefusal {
    /// Its number in this boot of the computer's services.
    pub seq: u64,
    /// When (Unix ms).
    pub at: i64,
    /// The name the client sent (TLS or HTTP), or the address.
    pub host: String,
    pub port: u16,
    pub why: String,
}

impl NetRefusal {
    /// `blocked: example.com:443, not on the allowlist`.
    pub fn line(&self) -> String {
        let host: String = self.host.chars().filter(|c| !c.is_control()).take(253).collect();
        let why: String = self.why.chars().filter(|c| !c.is_control()).take(300).collect();
        format!("blocked: {host}:{}, {why}", self.port)
    }
}

/// The refusals after a cursor, and the cursor to ask with next time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetRefusals {
    /// Which boot of the computer's services the numbers count in (a new boot counts anew).
    pub boot: String,
    /// The last number given out in that boot.
    pub next: u64,
    pub refusals: Vec<NetRefusal>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn policies_read_from_words_and_back() {
        assert_eq!(NetPolicy::from_words(&words("open")), Ok(NetPolicy::Open));
        assert_eq!(NetPolicy::from_words(&words("offline")), Ok(NetPolicy::Offline));
        let p = NetPolicy::from_words(&words("allow Example.ORG. *.shop.test 10.1.2.3 10.9.8.7/16 example.org")).unwrap();
        assert_eq!(p.to_string(), "allow example.org shop.test 10.1.2.3 10.9.0.0/16");
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json, serde_json::json!({"mode": "allow", "allow": ["example.org", "shop.test", "10.1.2.3", "10.9.0.0/16"]}));
        assert_eq!(serde_json::from_value::<NetPolicy>(json).unwrap(), p);
        assert_eq!(serde_json::to_value(NetPolicy::Open).unwrap(), serde_json::json!({"mode": "open"}));
    }

    #[test]
    fn bad_entries_are_refused_with_a_reason() {
        for bad in ["allow", "open x", "closed", "allow exa_mple.org", "allow 10.0.0.1/33", "allow ::1", "allow -a.org", "allow 1.2.3", "allow a..b"] {
            let e = NetPolicy::from_words(&words(bad)).unwrap_err();
            assert!(!e.is_empty(), "{bad}");
        }
        assert!(serde_json::from_value::<NetPolicy>(serde_json::json!({"mode": "allow", "allow": ["rm -rf /"]})).is_err());
    }

    #[test]
    fn a_refusal_reads_as_one_line() {
        let r = NetRefusal { seq: 1, at: 0, host: "example.com\n".into(), port: 443, why: "not on the allowlist".into() };
        assert_eq!(r.line(), "blocked: example.com:443, not on the allowlist");
    }
}
