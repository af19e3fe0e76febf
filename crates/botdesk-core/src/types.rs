//! Identifiers and plain data shared by every layer.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($name:ident) => {
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ts_rs::TS)]
        #[serde(transparent)]
        pub struct $name(String);
        impl $name {
            pub fn new(s: impl Into<String>) -> Self {
                Self(s.into())
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}
id_type!(BotId);
id_type!(ComputerId);
id_type!(HostName);

impl HostName {
    /// The name of the Docker engine on this machine.
    pub const LOCAL: &'static str = "local";
    pub fn local() -> Self {
        Self::new(Self::LOCAL)
    }
    pub fn is_local(&self) -> bool {
        self.0 == Self::LOCAL
    }
}

/// Team: one computer shared by the bots of a workspace. Private: a whole computer is one bot's home.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "lowercase")]
pub enum ComputerScope {
    Team,
    Private,
}

impl ComputerScope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Team => "team",
            Self::Private => "private",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "team" => Some(Self::Team),
            "private" => Some(Self::Private),
            _ => None,
        }
    }
}

/// Resource limits of one computer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    pub memory_bytes: u64,
    /// CPUs in billionths, as Docker counts them (2_000_000_000 = 2 CPUs).
    pub nano_cpus: i64,
    pub pids: i64,
    /// `/dev/shm`, sized for several browsers.
    pub shm_bytes: u64,
}

impl Default for Resources {
    fn default() -> Self {
        Self { memory_bytes: 2 << 30, nano_cpus: 2_000_000_000, pids: 2048, shm_bytes: 1 << 30 }
    }
}

/// Everything a provider needs to create (or find) a computer.
#[derive(Debug, Clone)]
pub struct ComputerSpec {
    pub id: ComputerId,
    pub name: String,
    pub scope: ComputerScope,
    /// The volume holding its home (the docker provider creates it with the computer's labels).
    /// A computer found with another home volume is made anew on this one.
    pub home_volume: String,
    pub resources: Resources,
    /// The Docker host it runs on ([`HostName::local`] for this machine's engine).
    pub host: HostName,
}

/// Whom a bot's commands, shells, browser and files run as inside its computer. A Private
/// computer's bot is uid 1000 and owns the whole home. Each bot of a Team computer has a uid of
/// its own (from [`BotUser::FIRST_TEAM_UID`], never reused) and the bots' group
/// [`BotUser::SHARED_GID`]: its folder `bots/<id>` is its alone (mode 0700), `shared/` belongs
/// to that group, and its display admits only it and the screen services.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BotUser {
    pub uid: u32,
    pub gid: u32,
}

impl BotUser {
    /// The bot of a Private computer, and the owner of everything outside the bots' folders.
    pub const PRIVATE: BotUser = BotUser { uid: 1000, gid: 1000 };
    /// The group of a Team computer's bots, which owns `shared/` (setgid, mode 2770).
    pub const SHARED_GID: u32 = 1999;
    pub const FIRST_TEAM_UID: u32 = 2001;
    /// The last uid a Team bot may get: Docker's user-namespace remapping maps 65,536 uids.
    pub const LAST_TEAM_UID: u32 = 65_000;

    /// A bot of a Team computer, by its uid.
    pub fn team(uid: u32) -> Self {
        Self { uid, gid: Self::SHARED_GID }
    }
    /// Whom a bot with `team_uid` runs as on a computer of `scope`.
    pub fn on(scope: ComputerScope, team_uid: u32) -> Self {
        match scope {
            ComputerScope::Team => Self::team(team_uid),
            ComputerScope::Private => Self::PRIVATE,
        }
    }
}

impl Default for BotUser {
    fn default() -> Self {
        Self::PRIVATE
    }
}

/// A Team bot's folder and the uid that owns it (and its browser profile).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FolderOwner {
    pub bot: BotId,
    pub uid: u32,
}

/// Who owns what in a computer's home (see `ComputerProvider::set_owners`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HomeOwners {
    pub scope: ComputerScope,
    /// The bots of a Team computer (none on a Private one).
    pub bots: Vec<FolderOwner>,
    /// Everything is given its owner (after a load, which writes as root); otherwise only the
    /// top folders, and the whole of a bot's folder whose top has another owner.
    pub all: bool,
}

/// A computer as the provider knows it: found again by id (the docker provider by its labels).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComputerRef {
    pub id: ComputerId,
    /// The Docker host it runs on.
    pub host: HostName,
}

impl ComputerRef {
    /// A computer on this machine's engine.
    pub fn local(id: ComputerId) -> Self {
        Self { id, host: HostName::local() }
    }
}

impl From<&ComputerSpec> for ComputerRef {
    fn from(s: &ComputerSpec) -> Self {
        Self { id: s.id.clone(), host: s.host.clone() }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Provisioned {
    /// True when the machine was created now (its workspace may need restoring); false when an
    /// existing machine was reconnected.
    pub fresh: bool,
    /// Opaque provider handle (a container id for docker).
    pub provider_ref: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MachineStatus {
    Running,
    Stopped,
    Missing,
}

impl MachineStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Stopped => "stopped",
            Self::Missing => "missing",
        }
    }
}

/// Tokens of model calls, as the provider counted them. `input` is what was neither read from nor
/// written to the provider's prompt cache; the whole prompt is `input + cache_read + cache_write`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

impl Usage {
    /// The whole prompt, cached parts included.
    pub fn prompt(&self) -> u64 {
        self.input.saturating_add(self.cache_read).saturating_add(self.cache_write)
    }

    pub fn add(&mut self, o: &Usage) {
        self.input = self.input.saturating_add(o.input);
        self.output = self.output.saturating_add(o.output);
        self.cache_read = self.cache_read.saturating_add(o.cache_read);
        self.cache_write = self.cache_write.saturating_add(o.cache_write);
    }
}

impl fmt::Display for Usage {
    /// `12,345 in (10,000 from cache, 1,200 to cache), 321 out`: tokens, as in "… tokens".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn n(v: u64) -> String {
            let s = v.to_string();
            let mut out = String::new();
            for (i, c) in s.chars().enumerate() {
                if i > 0 && (s.len() - i).is_multiple_of(3) {
                    out.push(',');
                }
                out.push(c);
            }
            out
        }
        write!(f, "{} in", n(self.prompt()))?;
        match (self.cache_read, self.cache_write) {
            (0, 0) => {}
            (r, 0) => write!(f, " ({} from cache)", n(r))?,
            (0, w) => write!(f, " ({} to cache)", n(w))?,
            (r, w) => write!(f, " ({} from cache, {} to cache)", n(r), n(w))?,
        }
        write!(f, ", {} out", n(self.output))
    }
}

#[cfg(test)]
mod usage_tests {
    use super::Usage;

    #[test]
    fn usage_reads_like_a_person_would_say_it() {
        let u = Usage { input: 2_345, output: 321, cache_read: 10_000, cache_write: 0 };
        assert_eq!(u.to_string(), "12,345 in (10,000 from cache), 321 out");
        assert_eq!(Usage::default().to_string(), "0 in, 0 out");
        let mut t = Usage { input: u64::MAX, ..Usage::default() };
        t.add(&u);
        assert_eq!(t.input, u64::MAX, "sums saturate");
    }
}

/// A model's prices in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct Prices {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
}

impl Prices {
    /// What `u` costs in dollars.
    pub fn cost(&self, u: &Usage) -> f64 {
        (u.input as f64 * self.input + u.output as f64 * self.output + u.cache_read as f64 * self.cache_read + u.cache_write as f64 * self.cache_write) / 1e6
    }

    /// The model's list prices from the table of models (`crate::models`); a person can change
    /// them (`botdesk model prices`).
    pub fn default_for(model: &str) -> Option<Self> {
        crate::models::lookup(model).info.prices()
    }
}

/// What one run may spend: tokens (prompt, cached or not, and output) and, optionally, dollars.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct Budget {
    pub tokens: u64,
    pub usd: Option<f64>,
}

impl Budget {
    /// Enough for a long run (a 60-step GUI run is a few hundred thousand), not for a runaway one.
    pub const DEFAULT_TOKENS: u64 = 2_000_000;

    /// Why a run that spent `used` (and `usd`, when its prices are known) must stop, if it must.
    pub fn exceeded(&self, used: &Usage, usd: Option<f64>) -> Option<String> {
        let tokens = used.prompt().saturating_add(used.output);
        if tokens >= self.tokens {
            return Some(format!(
                "the run reached its budget of {} tokens (it used {}); raise it with `botdesk bot budget BOT --tokens N`",
                self.tokens, tokens
            ));
        }
        match (self.usd, usd) {
            (Some(limit), Some(spent)) if spent >= limit => {
                Some(format!("the run reached its budget of ${limit:.2} (it spent ${spent:.4}); raise it with `botdesk bot budget BOT --usd X`"))
            }
            _ => None,
        }
    }
}

impl Default for Budget {
    fn default() -> Self {
        Budget { tokens: Self::DEFAULT_TOKENS, usd: None }
    }
}

#[cfg(test)]
mod cost_tests {
    use super::*;

    #[test]
    fn prices_and_budgets() {
        let p = Prices::default_for("claude-sonnet-4-5-20250929").unwrap();
        let u = Usage { input: 1_000_000, output: 100_000, cache_read: 2_000_000, cache_write: 0 };
        assert!((p.cost(&u) - (3.0 + 1.5 + 0.6)).abs() < 1e-9);
        assert_eq!(Prices::default_for("gpt-4o-mini").unwrap().input, 0.15, "the longest known start wins");
        assert_eq!(Prices::default_for("openai/gpt-4o").unwrap().input, 2.5);
        assert!(Prices::default_for("llama3.1").is_none());
        // Each Opus of its own price (4.6 and 4.7 are not 4's $15).
        assert_eq!(Prices::default_for("claude-opus-4-6").unwrap().input, 5.0);
        assert_eq!(Prices::default_for("claude-opus-4-7").unwrap().input, 5.0);
        assert_eq!(Prices::default_for("claude-opus-4-1-20250805").unwrap().input, 15.0);
        let b = Budget { tokens: 3_100_001, usd: Some(5.0) };
        assert!(b.exceeded(&u, Some(5.1)).unwrap().contains("budget of $5.00"));
        assert!(b.exceeded(&u, None).is_none());
        assert!(Budget { tokens: 3_100_000, usd: None }.exceeded(&u, None).unwrap().contains("3100000 tokens"));
    }
}

/// How much a model takes in (its context window) and is asked to give out per call, in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
pub struct Limits {
    pub context_window: u64,
    pub max_output: u64,
    /// Claude's extended thinking budget per turn in tokens (at least 1,024; 0: off); None: the
    /// table of models' default for the family (models with adaptive thinking decide for
    /// themselves).
    pub thinking: Option<u32>,
}

impl Limits {
    /// What the table of models says of this model (`crate::models`); an unknown model of a
    /// provider gets its provider's family row, anything else a local server's.
    pub fn default_for(kind: &str, model: &str) -> Self {
        crate::models::lookup_for(kind, model).info.limits()
    }
}
