//! What a bot must ask the person before doing: a download, an upload (a page's file chooser),
//! submitting a form on listed domains, a shell command matching a listed pattern, a run's
//! spend passing an amount, and optionally opening a page on a domain not yet allowed. The
//! person answers once, always for that site, or no (with a note the model is told).

use serde::{Deserialize, Serialize};

/// The most patterns or domains of one kind.
pub const MAX_ENTRIES: usize = 100;

/// A bot's approvals (none by default).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ts_rs::TS)]
#[serde(default, deny_unknown_fields)]
pub struct Approvals {
    /// Before a file downloads in its browser.
    pub downloads: bool,
    /// Before a page of its browser opens a file chooser (to upload a file).
    pub uploads: bool,
    /// Before its browser submits a form on these domains (and their subdomains); `*`: any.
    pub forms: Vec<String>,
    /// Before a shell command containing one of these runs (`*` stands for any characters).
    pub commands: Vec<String>,
    /// Once a run has spent more than this many dollars (models with prices only).
    pub spend_usd: Option<f64>,
    /// Before its browser opens a page on a domain not yet allowed always.
    pub new_domains: bool,
    /// What the person allowed for good ("Always for this site"), as `KIND HOST`
    /// (`form shop.example`, `download files.example`, `upload …`, `page …`).
    pub always: Vec<String>,
}

/// Something the bot's browser waits on the person's answer for (the computer holds it paused).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingApproval {
    /// Its number in the computer's watch of that display.
    pub id: u64,
    pub kind: ApprovalKind,
    /// The request's address (for an upload: the page's).
    pub url: String,
    pub host: String,
}

/// How the person answered a question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Allow this once.
    Allow,
    /// Allow, and the same on this site from now on.
    Always,
    Deny,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Always => "always",
            Verdict::Deny => "deny",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "allow" => Verdict::Allow,
            "always" => Verdict::Always,
            "deny" => Verdict::Deny,
            _ => return None,
        })
    }
    pub fn allows(self) -> bool {
        self != Verdict::Deny
    }
}

/// What an approval is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalKind {
    Download,
    Upload,
    Form,
    Page,
    Command,
    Spend,
}

impl ApprovalKind {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "download" => Self::Download,
            "upload" => Self::Upload,
            "form" => Self::Form,
            "page" => Self::Page,
            "command" => Self::Command,
            "spend" => Self::Spend,
            _ => return None,
        })
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Download => "download",
            Self::Upload => "upload",
            Self::Form => "form",
            Self::Page => "page",
            Self::Command => "command",
            Self::Spend => "spend",
        }
    }
    /// "Always for this site" means something for it.
    pub fn per_site(self) -> bool {
        matches!(self, Self::Download | Self::Upload | Self::Form | Self::Page)
    }
}

fn domain_ok(d: &str) -> bool {
    let label = |l: &str| !l.is_empty() && l.len() <= 63 && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    d == "*" || (d.len() <= 253 && d.split('.').all(label))
}

/// `host` is `domain` or under it.
pub fn under(host: &str, domain: &str) -> bool {
    domain == "*" || host == domain || host.strip_suffix(domain).is_some_and(|rest| rest.ends_with('.'))
}

/// Whether `pattern` (`*`: any characters) occurs in `text`.
pub fn pattern_in(pattern: &str, text: &str) -> bool {
    // Anchored glob of `*pattern*`, by the usual two-pointer walk.
    let p: Vec<char> = format!("*{pattern}*").chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < t.len() {
        if i < p.len() && p[i] != '*' && p[i] == t[j] {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(s) = star {
            i = s + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == '*')
}

impl Approvals {
    /// The policy from the words of `botdesk bot approvals BOT …`: `none`, or any of `downloads`,
    /// `uploads`, `new-domains`, `form DOMAIN`, `command PATTERN`, `spend USD`.
    pub fn from_words(words: &[String]) -> Result<Self, String> {
        let mut a = Approvals::default();
        if words.len() == 1 && words[0] == "none" {
            return Ok(a);
        }
        let mut it = words.iter();
        while let Some(w) = it.next() {
            let mut value = |what: &str| it.next().cloned().ok_or_else(|| format!("{w} needs {what}"));
            match w.as_str() {
                "downloads" => a.downloads = true,
                "uploads" => a.uploads = true,
                "new-domains" => a.new_domains = true,
                "form" => a.forms.push(value("a domain (or *)")?),
                "command" => a.commands.push(value("a pattern")?),
                "spend" => {
                    let v = value("an amount in dollars")?;
                    a.spend_usd = Some(v.trim_start_matches('$').parse().map_err(|_| format!("{v:?} is not an amount in dollars"))?);
                }
                other => return Err(format!("{other:?}: say none, or any of downloads, uploads, new-domains, form DOMAIN, command PATTERN, spend USD")),
            }
        }
        a.normalize()?;
        Ok(a)
    }

    /// Lowercases the domains and checks every entry.
    pub fn normalize(&mut self) -> Result<(), String> {
        for d in &mut self.forms {
            *d = d.trim().trim_start_matches("*.").to_ascii_lowercase();
            if !domain_ok(d) {
                return Err(format!("{d:?} is not a domain (e.g. shop.example, or * for every site)"));
            }
        }
        for c in &self.commands {
            if c.trim().is_empty() || c.len() > 500 || c.chars().any(char::is_control) {
                return Err(format!("{c:?}: a command pattern is 1 to 500 characters on one line"));
            }
        }
        if let Some(usd) = self.spend_usd {
            if !(usd.is_finite() && usd >= 0.0) {
                return Err("the spend to ask at is an amount of dollars, 0 or more".into());
            }
        }
        for entry in &self.always {
            let ok = entry.split_once(' ').is_some_and(|(k, h)| ApprovalKind::parse(k).is_some_and(ApprovalKind::per_site) && domain_ok(h) && h != "*");
            if !ok {
                return Err(format!("{entry:?} is not KIND HOST"));
            }
        }
        if [self.forms.len(), self.commands.len(), self.always.len()].iter().any(|n| *n > MAX_ENTRIES) {
            return Err(format!("at most {MAX_ENTRIES} domains, patterns or standing answers of each kind"));
        }
        Ok(())
    }

    /// Something the bot's browser must be watched for.
    pub fn watches_browser(&self) -> bool {
        self.downloads || self.uploads || !self.forms.is_empty() || self.new_domains
    }

    /// The person allowed this kind on this host for good.
    pub fn always_allows(&self, kind: ApprovalKind, host: &str) -> bool {
        self.always.iter().any(|e| e.split_once(' ').is_some_and(|(k, h)| k == kind.as_str() && under(host, h)))
    }

    /// Remembers "Always for this site".
    pub fn allow_always(&mut self, kind: ApprovalKind, host: &str) {
        let entry = format!("{} {}", kind.as_str(), host.to_ascii_lowercase());
        if kind.per_site() && !self.always.contains(&entry) {
            self.always.push(entry);
        }
    }

    /// The pattern a shell command matches, when it must be asked for.
    pub fn command_needs(&self, command: &str) -> Option<&str> {
        self.commands.iter().find(|p| pattern_in(p, command)).map(String::as_str)
    }
}

impl std::fmt::Display for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts: Vec<String> = vec![];
        if self.downloads {
            parts.push("downloads".into());
        }
        if self.uploads {
            parts.push("uploads".into());
        }
        if !self.forms.is_empty() {
            parts.push(format!("forms on {}", self.forms.join(", ")));
        }
        if !self.commands.is_empty() {
            parts.push(format!("commands containing {}", self.commands.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ")));
        }
        if let Some(usd) = self.spend_usd {
            parts.push(format!("a run's spend past ${usd:.2}"));
        }
        if self.new_domains {
            parts.push("pages on new domains".into());
        }
        let asks = if parts.is_empty() { "asks for nothing".to_string() } else { format!("asks before {}", parts.join("; ")) };
        match self.always.len() {
            0 => f.write_str(&asks),
            n => write!(f, "{asks} (always allowed: {})", if n <= 5 { self.always.join(", ") } else { format!("{n} sites") }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn words_patterns_and_sites() {
        let a = Approvals::from_words(&words("downloads form Shop.Example command rm* spend 2.5")).unwrap();
        assert_eq!((a.downloads, a.forms.as_slice(), a.spend_usd), (true, &["shop.example".to_string()][..], Some(2.5)));
        assert_eq!(a.command_needs("cd x && rm -rf /tmp/y"), Some("rm*"));
        assert_eq!(a.command_needs("ls"), None);
        assert!(a.watches_browser());
        assert_eq!(a.to_string(), "asks before downloads; forms on shop.example; commands containing `rm*`; a run's spend past $2.50");
        assert!(Approvals::from_words(&words("form")).unwrap_err().contains("needs a domain"));
        assert!(Approvals::from_words(&words("spend lots")).is_err());
        assert!(Approvals::from_words(&words("teleport")).is_err());
        assert_eq!(Approvals::from_words(&words("none")).unwrap(), Approvals::default());
        assert!(under("a.shop.example", "shop.example") && under("shop.example", "shop.example") && !under("evilshop.example", "shop.example"));
        assert!(pattern_in("git push*--force", "git push origin main --force") && !pattern_in("git push*--force", "git pull --force"));
        assert!(pattern_in("curl", "x curl y") && !pattern_in("curl", "cur l"));
        let mut b = a.clone();
        b.allow_always(ApprovalKind::Form, "shop.example");
        assert!(b.always_allows(ApprovalKind::Form, "www.shop.example") && !b.always_allows(ApprovalKind::Download, "shop.example"));
        b.normalize().unwrap();
    }
}
