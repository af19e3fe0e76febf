//! What this process knows and holds of one computer: its boot lock, its home's lock, whether this
//! process made it ready, and the desktops it brought up there. One handle per computer, made on first use and
//! shared by every call on that computer; nothing here is shared between computers.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use botdesk_core::ComputerId;

#[derive(Default)]
pub(crate) struct ComputerHandle {
    /// Held while the computer is brought up: two calls of this process do not boot it at once,
    /// and its boot holds up no other computer.
    pub boot: tokio::sync::Mutex<()>,
    /// Held while its home is checkpointed or restored: one at a time in this process (the home's
    /// lock file keeps processes apart).
    pub home: tokio::sync::Mutex<()>,
    /// This process provisioned and prepared it, so a second call skips the set-up.
    ready: AtomicBool,
    /// Desktops this process brought up here (slot, view token), so a graphical call skips the
    /// set-up; forgotten on release, when the computer is set up again, and when a call on the
    /// display fails.
    displays: Mutex<HashSet<(u32, String)>>,
}

impl ComputerHandle {
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    pub fn has_display(&self, slot: u32, token: &str) -> bool {
        self.displays.lock().unwrap().contains(&(slot, token.to_string()))
    }

    pub fn add_display(&self, slot: u32, token: &str) {
        self.displays.lock().unwrap().insert((slot, token.to_string()));
    }

    pub fn forget_display(&self, slot: u32) {
        self.displays.lock().unwrap().retain(|(s, _)| *s != slot);
    }

    /// A computer set up again has none of the displays brought up before.
    pub fn forget_displays(&self) {
        self.displays.lock().unwrap().clear();
    }
}

/// The handles of this process, by computer.
#[derive(Default)]
pub(crate) struct Computers(Mutex<HashMap<ComputerId, Arc<ComputerHandle>>>);

impl Computers {
    pub fn get(&self, id: &ComputerId) -> Arc<ComputerHandle> {
        self.0.lock().unwrap().entry(id.clone()).or_default().clone()
    }
}
