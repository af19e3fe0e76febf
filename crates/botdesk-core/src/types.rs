//! Identifiers and plain data shared by every layer.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($name:ident) => {
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
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

/// Team: one computer shared by the bots of a workspace. Private: a whole computer is one bot's home.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
}

/// A computer as the provider knows it: found again by id (the docker provider by its labels).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComputerRef {
    pub id: ComputerId,
}

impl From<&ComputerSpec> for ComputerRef {
    fn from(s: &ComputerSpec) -> Self {
        Self { id: s.id.clone() }
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
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
                if i > 0 && (s.len() - i) % 3 == 0 {
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
