//! Logins the model never sees: the site a saved login belongs to (an origin, matched exactly),
//! and the one-time codes of a TOTP seed (RFC 6238: HMAC-SHA1, 30-second steps, 6 digits).

use serde::{Deserialize, Serialize};
use sha1::{Digest, Sha1};

/// Where a saved login may be filled in: one origin (scheme, host, port). `example.org` means
/// `https://example.org`; `http://10.0.0.2:8080/login` means `http://10.0.0.2:8080`. Subdomains
/// and other ports are other sites.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct LoginSite(String);

impl LoginSite {
    pub fn parse(input: &str) -> Result<Self, String> {
        let s = input.trim().to_ascii_lowercase();
        let (scheme, rest) = match s.split_once("://") {
            Some((scheme, rest)) => (scheme.to_string(), rest.to_string()),
            None => ("https".to_string(), s.clone()),
        };
        if scheme != "https" && scheme != "http" {
            return Err(format!("{input:?}: a login's site is an http(s) address, not {scheme}:"));
        }
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        if authority.contains('@') {
            return Err(format!("{input:?}: a site is written without a user name (give it with --user)"));
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| format!("{input:?}: {p:?} is not a port"))?)),
            None => (authority, None),
        };
        let label =
            |l: &str| !l.is_empty() && l.len() <= 63 && !l.starts_with('-') && !l.ends_with('-') && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        if host.is_empty() || host.len() > 253 || !host.split('.').all(label) {
            return Err(format!("{input:?} is not a site: give a domain (example.org), an address, or an origin (http://10.0.0.2:8080)"));
        }
        let default = if scheme == "https" { 443 } else { 80 };
        let origin = match port {
            Some(p) if p != default => format!("{scheme}://{host}:{p}"),
            _ => format!("{scheme}://{host}"),
        };
        Ok(LoginSite(origin))
    }

    /// `scheme://host[:port]`, as a page's `location.origin` says it.
    pub fn origin(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for LoginSite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for LoginSite {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        LoginSite::parse(&s)
    }
}

impl From<LoginSite> for String {
    fn from(s: LoginSite) -> String {
        s.0
    }
}

/// A secret on its way into the computer: written as its text, never shown by `Debug`.
#[derive(Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(text: String) -> Self {
        Secret(text)
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[secret]")
    }
}

/// The longest password or seed kept (a keyring entry is small).
pub const MAX_SECRET: usize = 4096;

/// A TOTP seed as authenticator apps show it (base32, any case, spaces and `=` ignored).
pub fn totp_seed(text: &str) -> Result<Vec<u8>, String> {
    let mut bits: u64 = 0;
    let (mut n, mut out) = (0u32, Vec::new());
    for c in text.chars().filter(|c| !c.is_whitespace() && *c != '=' && *c != '-') {
        let v = match c.to_ascii_uppercase() {
            c @ 'A'..='Z' => c as u64 - 'A' as u64,
            c @ '2'..='7' => c as u64 - '2' as u64 + 26,
            _ => return Err(format!("the one-time-code seed is base32 (letters A-Z and digits 2-7), and {c:?} is not")),
        };
        bits = (bits << 5) | v;
        n += 5;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
            bits &= (1 << n) - 1;
        }
    }
    if out.len() < 10 {
        return Err("the one-time-code seed is too short (at least 16 base32 characters)".into());
    }
    Ok(out)
}

fn hmac_sha1(key: &[u8], message: &[u8]) -> [u8; 20] {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..20].copy_from_slice(&Sha1::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let inner = Sha1::new().chain_update(k.map(|b| b ^ 0x36)).chain_update(message).finalize();
    Sha1::new().chain_update(k.map(|b| b ^ 0x5c)).chain_update(inner).finalize().into()
}

/// The code of `seed` at `unix_s` with `digits` digits (RFC 6238 with SHA-1 and 30-second steps).
pub fn totp_digits(seed: &[u8], unix_s: u64, digits: u32) -> String {
    let mac = hmac_sha1(seed, &(unix_s / 30).to_be_bytes());
    let at = (mac[19] & 0x0f) as usize;
    let code = u32::from_be_bytes([mac[at] & 0x7f, mac[at + 1], mac[at + 2], mac[at + 3]]) % 10u32.pow(digits);
    format!("{code:0width$}", width = digits as usize)
}

/// The 6-digit code authenticator apps show at `unix_s`.
pub fn totp(seed: &[u8], unix_s: u64) -> String {
    totp_digits(seed, unix_s, 6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sites_are_origins() {
        let o = |s: &str| LoginSite::parse(s).map(|s| s.origin().to_string());
        assert_eq!(o("Example.org").unwrap(), "https://example.org");
        assert_eq!(o("https://example.org:443/login?x").unwrap(), "https://example.org");
        assert_eq!(o("http://10.0.0.2:8080/login").unwrap(), "http://10.0.0.2:8080");
        assert_eq!(o("http://10.0.0.2:80").unwrap(), "http://10.0.0.2");
        assert!(o("ftp://example.org").unwrap_err().contains("http(s)"));
        assert!(o("https://me@example.org").unwrap_err().contains("user name"));
        assert!(o("example.org:0").is_err());
        assert!(o("exa mple.org").is_err());
        assert!(o("").is_err());
    }

    /// RFC 6238, appendix B (SHA-1): the 8-digit codes, and their last 6 digits.
    #[test]
    fn totp_matches_the_rfc() {
        let seed = b"12345678901234567890";
        for (t, code) in [
            (59, "94287082"),
            (1111111109, "07081804"),
            (1111111111, "14050471"),
            (1234567890, "89005924"),
            (2000000000, "69279037"),
            (20000000000, "65353130"),
        ] {
            assert_eq!(totp_digits(seed, t, 8), code);
            assert_eq!(totp(seed, t), code[2..]);
        }
        // The same seed in base32, as an app shows it.
        assert_eq!(totp_seed("GEZD GNBV GY3T QOJQ GEZD GNBV GY3T QOJQ").unwrap(), seed);
        assert!(totp_seed("GEZDGNBV1").unwrap_err().contains("base32"));
        assert!(totp_seed("GEZD").unwrap_err().contains("too short"));
    }
}
