//! The person's interactive shells (a real PTY on the bot's computer, as the workspace user, in
//! the bot's folder). Only while the person holds control of the bot's screen; release or expiry
//! closes every shell of that bot, and everything started in them dies with it.

use botdesk_core::{BotId, CallCtx};
use bytes::Bytes;

use crate::{Engine, EngineError, ErrorCode, Result};

/// A person's open shell: its bot, its computer and its input (dropping the input ends it).
type OpenShell = (BotId, botdesk_core::ComputerId, tokio::sync::mpsc::Sender<Bytes>);

/// The person's open shells, by id.
#[derive(Default)]
pub(crate) struct Terminals(std::sync::Mutex<std::collections::HashMap<String, OpenShell>>);

/// An open shell: its id and what it prints. Closed by [`Engine::close_terminals`] or when its
/// shell exits (the output then ends).
pub struct Terminal {
    pub id: String,
    pub output: tokio::sync::mpsc::Receiver<Bytes>,
}

impl Engine {
    pub async fn open_terminal(&self, bot: &crate::BotRef, cols: u16, rows: u16) -> Result<Terminal> {
        let Some(control) = self.control_of(&bot.id).await? else {
            return Err(EngineError::new(ErrorCode::Busy, "take control of the bot's screen to open a shell on its computer"));
        };
        let (b, computer) = self.bot_and_computer(&bot.id).await?;
        let cref = self.ensure_running(&computer).await?;
        let cwd = self.resolve(&b, &computer, "")?;
        // The shell carries its control's tag: when that control ends, in this process or any
        // other, everything started in it is stopped.
        let display = self.display_of(&computer.id, &b.id).await?;
        let ctx = CallCtx { control: Some(control.lease_id), display, ..crate::bot_ctx(&b, &computer) };
        let s = self.inner.provider.open_shell(&cref, &cwd, cols, rows, &ctx).await?;
        self.inner.terminals.0.lock().unwrap().insert(s.id.clone(), (b.id.clone(), computer.id.clone(), s.input));
        Ok(Terminal { id: s.id, output: s.output })
    }

    /// Keys typed into a shell. Refused once control is gone.
    pub async fn terminal_input(&self, id: &str, data: Bytes) -> Result<()> {
        let (bot, input) = {
            let t = self.inner.terminals.0.lock().unwrap();
            let (bot, _, input) = t.get(id).ok_or_else(|| EngineError::new(ErrorCode::NotFound, "this shell is closed"))?;
            (bot.clone(), input.clone())
        };
        let Some(lease) = self.control_of(&bot).await? else {
            self.close_terminals(&bot);
            return Err(EngineError::new(ErrorCode::Stale, "control of the screen ended, so the shell was closed"));
        };
        // Typing is the person's activity: it renews control (at most every 10 s).
        if lease.expires_at - self.now() < self.inner.policy.control_ttl - 10_000 {
            self.renew_control(&bot, &lease.lease_id).await?;
        }
        input.send(data).await.map_err(|_| EngineError::new(ErrorCode::NotFound, "this shell has ended"))
    }

    pub async fn terminal_resize(&self, id: &str, cols: u16, rows: u16) -> Result<()> {
        let computer = self.inner.terminals.0.lock().unwrap().get(id).map(|(_, c, _)| c.clone());
        let computer = computer.ok_or_else(|| EngineError::new(ErrorCode::NotFound, "this shell is closed"))?;
        Ok(self.inner.provider.resize_shell(&self.cref_of(&computer).await?, id, cols, rows).await?)
    }

    pub fn close_terminal(&self, id: &str) {
        self.inner.terminals.0.lock().unwrap().remove(id);
    }

    /// Closes every shell of a bot (its processes are killed). Returns how many there were.
    pub fn close_terminals(&self, bot: &BotId) -> usize {
        let mut t = self.inner.terminals.0.lock().unwrap();
        let before = t.len();
        t.retain(|_, (b, _, _)| b != bot);
        before - t.len()
    }

    /// Shells of bots whose control has ended (released or expired here or in another process).
    pub async fn close_orphan_terminals(&self) -> Result<usize> {
        let bots: Vec<BotId> = self.inner.terminals.0.lock().unwrap().values().map(|(b, _, _)| b.clone()).collect();
        let mut closed = 0;
        for b in bots {
            if self.control_of(&b).await?.is_none() {
                closed += self.close_terminals(&b);
            }
        }
        Ok(closed)
    }
}
