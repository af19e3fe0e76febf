//! Commands and files on a bot's computer, with paths resolved the way the bot's own tools resolve
//! them (relative to its folder; nothing outside the workspace).

use std::time::Duration;

use botdesk_core::*;
use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use crate::{BotRef, Engine, Result};

impl Engine {
    pub(crate) fn resolve(&self, bot: &botdesk_store::Bot, computer: &botdesk_store::Computer, input: &str) -> Result<WorkspacePath> {
        Ok(resolve_for_bot(computer.scope, &bot.id, input)?)
    }

    /// Runs `sh -c COMMAND` in the bot's folder and returns its exit code and its output
    /// (stdout and stderr in arrival order, lossily decoded).
    pub async fn shell(&self, bot: &BotRef, command: &str) -> Result<(i32, String)> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let exit = self.exec(bot, vec!["sh".into(), "-c".into(), command.into()], None, None, Some(tx), CancellationToken::new()).await?;
        let mut out = Vec::new();
        while let Ok(o) = rx.try_recv() {
            out.extend_from_slice(&o.data);
        }
        Ok((exit.code, String::from_utf8_lossy(&out).into_owned()))
    }

    /// Runs a command on the bot's computer. `cwd` is relative to the bot's folder.
    pub async fn exec(
        &self,
        bot: &BotRef,
        argv: Vec<String>,
        cwd: Option<&str>,
        timeout: Option<Duration>,
        out: OutputSink,
        cancel: CancellationToken,
    ) -> Result<ExecExit> {
        self.exec_for(&bot.id, None, argv, None, cwd, timeout, out, cancel).await
    }

    /// [`Engine::exec`] for a run (the command's processes carry the run's tag, so they are
    /// stopped if the run's driver dies), with `stdin` for the command.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn exec_for(
        &self,
        bot: &BotId,
        run: Option<&str>,
        argv: Vec<String>,
        stdin: Option<Bytes>,
        cwd: Option<&str>,
        timeout: Option<Duration>,
        out: OutputSink,
        cancel: CancellationToken,
    ) -> Result<ExecExit> {
        let (bot, computer) = self.bot_and_computer(bot).await?;
        let cwd = self.resolve(&bot, &computer, cwd.unwrap_or(""))?;
        let cref = self.ensure_running(&computer).await?;
        let mut req = ExecRequest::new(argv).cwd(cwd);
        if let Some(t) = timeout {
            req = req.timeout(t);
        }
        if let Some(data) = stdin {
            req = req.stdin(data);
        }
        let display = self.display_of(&computer.id, &bot.id).await?;
        let ctx = CallCtx { cancel, run: run.map(str::to_string), display, ..crate::bot_ctx(&bot, &computer) };
        // A command that runs is activity: idle suspend never stops the computer under it.
        let keep_awake = async {
            let mut beat = tokio::time::interval(Duration::from_millis((self.inner.policy.idle_suspend / 3).max(1_000) as u64));
            beat.tick().await;
            loop {
                beat.tick().await;
                if let Err(e) = self.inner.store.touch(&computer.id, self.now()).await {
                    tracing::warn!("marking computer {} active: {e}", computer.id);
                }
            }
        };
        tokio::select! {
            exit = self.inner.provider.exec(&cref, req, out, &ctx) => Ok(exit?),
            _ = keep_awake => unreachable!("it never ends"),
        }
    }

    pub async fn files_list(&self, bot: &BotRef, path: &str) -> Result<(String, Vec<FileEntry>)> {
        let (bot, computer) = self.bot_and_computer(&bot.id).await?;
        let dir = self.resolve(&bot, &computer, path)?;
        let cref = self.ensure_running(&computer).await?;
        let mut entries = self.inner.provider.list(&cref, &dir, &crate::bot_ctx(&bot, &computer)).await?;
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        Ok((dir.to_string(), entries))
    }

    pub async fn files_read(&self, bot: &BotRef, path: &str, max_bytes: u64) -> Result<Bytes> {
        let (bot, computer) = self.bot_and_computer(&bot.id).await?;
        let file = self.resolve(&bot, &computer, path)?;
        let cref = self.ensure_running(&computer).await?;
        Ok(self.inner.provider.read(&cref, &file, max_bytes, &crate::bot_ctx(&bot, &computer)).await?)
    }

    /// Writes a file (parents created). Returns the workspace path written.
    pub async fn files_write(&self, bot: &BotRef, path: &str, data: Bytes, executable: bool) -> Result<String> {
        let (bot, computer) = self.bot_and_computer(&bot.id).await?;
        let file = self.resolve(&bot, &computer, path)?;
        let cref = self.ensure_running(&computer).await?;
        self.inner.provider.write(&cref, &file, data, executable, &crate::bot_ctx(&bot, &computer)).await?;
        Ok(file.to_string())
    }
}

/// A folder's listing as a model or an MCP client reads it: the folder, then one line a file
/// (`name  N bytes`) or folder (`name/`).
pub fn listing_text(dir: &str, entries: &[FileEntry]) -> String {
    let mut text = format!("{dir}:\n");
    for f in entries {
        let name = f.path.file_name().unwrap_or(".");
        match f.kind {
            FileKind::Dir => text.push_str(&format!("{name}/\n")),
            _ => text.push_str(&format!("{name}  {} bytes\n", f.size)),
        }
    }
    if entries.is_empty() {
        text.push_str("(empty)\n");
    }
    text
}
