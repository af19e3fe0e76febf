//! The person's settings, kept in `DATA_DIR/settings.json` so the app and the CLI share them:
//! computer resources and the screen limit. `SANDBOX_TEAM_SCREEN_LIMIT` in the environment wins
//! over the file (a test and operator input).

use serde::{Deserialize, Serialize};

use crate::{EngineError, Result};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
#[serde(default)]
pub struct Settings {
    /// Memory of each computer, MiB (512–65536). Applies to computers started afterwards.
    pub memory_mib: u64,
    /// CPUs of each computer (0.5–64). Applies to computers started afterwards.
    pub cpus: f64,
    /// At most this many bot desktops at once on one computer (1–16); none means no cap.
    pub screen_limit: Option<u32>,
    /// Keep one computer started in advance on this machine while the app runs, so a new bot's
    /// computer is ready at once (an idle computer: about 40 MiB, no CPU).
    pub spare_computer: bool,
    /// Every checkpoint version of a workspace is kept this many hours (1–8760)…
    pub history_hours: u32,
    /// …then the newest of each day, this many days (0–3650).
    pub history_days: u32,
    /// A checkpoint stops (the previous version kept) rather than leave less than this many GiB
    /// free on the disk of the data directory (0–1024).
    pub keep_free_gib: u32,
    /// Record the bot's screen while a run works and while the person holds control of it.
    pub record_screen: bool,
    /// Frames a second of a recording (1–30).
    pub record_fps: u32,
    /// The most a run's recording takes, MiB (16–8192); recording stops there and the run goes on.
    pub record_max_mib: u32,
    /// Recordings are removed this many days after their run ended (1–3650)…
    pub record_days: u32,
    /// …and the oldest go first once all of them take more than this many GiB (1–1024).
    pub record_total_gib: u32,
    /// A desktop notification when a bot's run finishes.
    pub notify_finished: bool,
    /// …when it fails.
    pub notify_failed: bool,
    /// …when it asks for the person (to take its screen, an approval, a safety check).
    pub notify_asks: bool,
    /// A running computer nobody has used this many minutes (0.5–1440) is saved and suspended,
    /// by the app or, once it has quit, by `botdesk computer idle-watch` it leaves behind.
    pub idle_minutes: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            memory_mib: 2048,
            cpus: 2.0,
            screen_limit: None,
            spare_computer: true,
            history_hours: 48,
            history_days: 30,
            keep_free_gib: 2,
            record_screen: true,
            record_fps: 4,
            record_max_mib: 200,
            record_days: 14,
            record_total_gib: 10,
            notify_finished: true,
            notify_failed: true,
            notify_asks: true,
            idle_minutes: 10.0,
        }
    }
}

impl Settings {
    pub fn validate(&self) -> Result<()> {
        if !(512..=65536).contains(&self.memory_mib) {
            return Err(EngineError::invalid(format!("memory must be 512 to 65536 MiB, not {}", self.memory_mib)));
        }
        if !(0.5..=64.0).contains(&self.cpus) {
            return Err(EngineError::invalid(format!("CPUs must be 0.5 to 64, not {}", self.cpus)));
        }
        if !(1..=8760).contains(&self.history_hours) {
            return Err(EngineError::invalid(format!("every version is kept 1 to 8760 hours, not {}", self.history_hours)));
        }
        if self.history_days > 3650 {
            return Err(EngineError::invalid(format!("daily versions are kept 0 to 3650 days, not {}", self.history_days)));
        }
        if self.keep_free_gib > 1024 {
            return Err(EngineError::invalid(format!("checkpoints keep 0 to 1024 GiB free, not {}", self.keep_free_gib)));
        }
        if !(1..=30).contains(&self.record_fps) {
            return Err(EngineError::invalid(format!("recordings take 1 to 30 frames a second, not {}", self.record_fps)));
        }
        if !(16..=8192).contains(&self.record_max_mib) {
            return Err(EngineError::invalid(format!("a run's recording may take 16 to 8192 MiB, not {}", self.record_max_mib)));
        }
        if !(1..=3650).contains(&self.record_days) {
            return Err(EngineError::invalid(format!("recordings are kept 1 to 3650 days, not {}", self.record_days)));
        }
        if !(1..=1024).contains(&self.record_total_gib) {
            return Err(EngineError::invalid(format!("all recordings together may take 1 to 1024 GiB, not {}", self.record_total_gib)));
        }
        if !(0.5..=1440.0).contains(&self.idle_minutes) {
            return Err(EngineError::invalid(format!("an idle computer is suspended after 0.5 to 1440 minutes, not {}", self.idle_minutes)));
        }
        if let Some(n) = self.screen_limit {
            if !(1..=16).contains(&n) {
                return Err(EngineError::invalid(format!("the screen limit must be 1 to 16, not {n}")));
            }
        }
        Ok(())
    }

    /// The file's settings, or the defaults when there is none. A damaged file is an error that
    /// names it (it is never silently replaced).
    pub fn load(path: &std::path::Path) -> Result<Settings> {
        match std::fs::read(path) {
            Ok(bytes) => {
                let s: Settings = serde_json::from_slice(&bytes).map_err(|e| EngineError::invalid(format!("{} is not valid settings: {e}", path.display())))?;
                s.validate()?;
                Ok(s)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Settings::default()),
            Err(e) => Err(EngineError::invalid(format!("cannot read {}: {e}", path.display()))),
        }
    }

    /// Writes atomically (temporary file, then rename).
    pub fn save(&self, path: &std::path::Path) -> Result<()> {
        self.validate()?;
        let tmp = path.with_extension("json.tmp");
        let io = |e: std::io::Error| EngineError::invalid(format!("cannot write {}: {e}", path.display()));
        std::fs::write(&tmp, serde_json::to_vec_pretty(self).expect("settings serialize")).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// How long checkpoint versions are kept.
    pub fn retention(&self) -> crate::versions::Retention {
        crate::versions::Retention { all_hours: self.history_hours, daily_days: self.history_days }
    }

    pub fn idle_ms(&self) -> i64 {
        (self.idle_minutes * 60_000.0) as i64
    }

    pub fn apply(&self, r: &mut botdesk_core::Resources) {
        r.memory_bytes = self.memory_mib << 20;
        r.nano_cpus = (self.cpus * 1e9) as i64;
    }
}

/// The settings in force in this process: a computer's resources, the screen limit and the idle
/// time, from the settings file; a screen limit given in the configuration
/// (`SANDBOX_TEAM_SCREEN_LIMIT`) wins, and the configuration's idle time holds until a settings
/// file names one.
pub(crate) struct InForce {
    now: std::sync::RwLock<(botdesk_core::Resources, Option<u32>, i64)>,
    screen_limit_override: Option<u32>,
}

impl InForce {
    pub fn new(resources: botdesk_core::Resources, screen_limit_override: Option<u32>, idle_ms: i64, file: &Settings) -> Self {
        InForce { now: std::sync::RwLock::new((resources, screen_limit_override.or(file.screen_limit), idle_ms)), screen_limit_override }
    }

    pub fn apply(&self, s: &Settings) {
        let mut now = self.now.write().unwrap();
        s.apply(&mut now.0);
        now.1 = self.screen_limit_override.or(s.screen_limit);
        now.2 = s.idle_ms();
    }

    /// How long a computer is unused before it is suspended, ms.
    pub fn idle_ms(&self) -> i64 {
        self.now.read().unwrap().2
    }

    pub fn resources(&self) -> botdesk_core::Resources {
        self.now.read().unwrap().0
    }

    pub fn screen_limit(&self) -> Option<u32> {
        self.now.read().unwrap().1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_round_trip_and_refuse_bad_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("settings.json");
        assert_eq!(Settings::load(&path).unwrap(), Settings::default());
        let s = Settings {
            memory_mib: 4096,
            cpus: 1.5,
            screen_limit: Some(3),
            spare_computer: false,
            history_hours: 24,
            history_days: 7,
            keep_free_gib: 5,
            record_screen: false,
            record_fps: 2,
            record_max_mib: 64,
            record_days: 3,
            record_total_gib: 2,
            notify_finished: false,
            notify_failed: true,
            notify_asks: false,
            idle_minutes: 0.5,
        };
        s.save(&path).unwrap();
        assert_eq!(Settings::load(&path).unwrap(), s);
        assert!(Settings { screen_limit: Some(0), ..s.clone() }.save(&path).is_err());
        assert!(Settings { memory_mib: 100, ..s.clone() }.save(&path).is_err());
        assert!(Settings { history_hours: 0, ..s.clone() }.save(&path).is_err());
        assert!(Settings { idle_minutes: 0.1, ..s.clone() }.save(&path).is_err());
        assert!(Settings { record_fps: 31, ..s.clone() }.save(&path).is_err());
        assert!(Settings { record_max_mib: 8, ..s.clone() }.save(&path).is_err());
        assert!(Settings { record_days: 0, ..s.clone() }.save(&path).is_err());
        assert!(Settings { record_total_gib: 0, ..s.clone() }.save(&path).is_err());
        assert_eq!(Settings::load(&path).unwrap(), s, "a refused save changes nothing");
        std::fs::write(&path, "{oops").unwrap();
        assert!(Settings::load(&path).unwrap_err().message.contains("settings.json"));
    }
}
