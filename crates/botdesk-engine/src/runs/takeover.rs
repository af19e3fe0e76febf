//! The person taking the screen mid-run: `request_takeover`, pausing at a step boundary, and
//! waiting until control is handed back.

use super::*;

/// The notes that begin and end the person's turn on the screen (a replay marks them).
pub(super) const NEEDS_YOU: &str = "The bot needs you: ";
pub(super) const PAUSED: &str = "Paused: the bot stopped between two steps and waits while you have its screen. Release hands it back and the task goes on.";
pub(super) const RESUMED: &str = "Resumed: you had the screen for ";

impl RunHost {
    /// The run waits for the person: status waiting_takeover until they release (finished or
    /// skipped), control expires (skipped) or the run is stopped.
    pub(super) async fn takeover(&self, reason: &str, cancel: &CancellationToken) -> ToolOutput {
        if let Err(e) = self.wait_for_person().await {
            return self.err(e);
        }
        self.message(MessageRole::System, &format!("{NEEDS_YOU}{reason}")).await;
        self.engine.emit(RunEvent::Status {
            bot: self.bot_id(),
            run_id: self.run.id.clone(),
            status: RunStatus::WaitingTakeover,
            error: Some(self.redactor.redact(reason)),
            failure: None,
        });
        match self.until_handed_back(cancel, None).await {
            Ok(r) => match r.takeover_result.unwrap_or(TakeoverResult::Skipped) {
                TakeoverResult::Finished => ToolOutput::ok(format!(
                    "finished: the person did what you asked and handed the screen back.{} Look at the screen again before going on.",
                    said(&r)
                )),
                TakeoverResult::Skipped => ToolOutput::ok(format!(
                    "skipped: the person handed the screen back without doing it.{} Find another way or explain what is missing.",
                    said(&r)
                )),
            },
            Err(why) => ToolOutput::error(why),
        }
    }

    /// Moves the run to waiting_takeover, its lease extended for as long as control may last.
    pub(super) async fn wait_for_person(&self) -> Result<()> {
        // What the person does on the screen is recorded too.
        self.recorder.ensure().await;
        let lease = self.lease.lock().await.clone();
        let run = self.engine.inner.store.run(&self.run.id).await?;
        let (_, renewed) = self.engine.wait_for_takeover(&run, &lease).await?;
        *self.lease.lock().await = renewed;
        Ok(())
    }

    /// Waits while the run waits for the person; returns the run once they handed the screen
    /// back, or why it cannot go on (stopped, or ended while paused). A paused run (`unattended`
    /// set) ends if nobody holds its screen that long after the pause (the take that should have
    /// followed failed, or the person's control ended without a release reaching it).
    pub(super) async fn until_handed_back(&self, cancel: &CancellationToken, unattended: Option<Duration>) -> std::result::Result<Run, String> {
        // What the person does in the bot's browser is theirs: the approvals' watch is lifted
        // (the run's next screen tool arms it again).
        if self.watching.swap(false, std::sync::atomic::Ordering::SeqCst) {
            self.stop_watching().await;
        }
        let since = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                _ = cancel.cancelled() => return Err("the run was stopped while waiting for the person".into()),
            }
            match self.engine.inner.store.run(&self.run.id).await {
                Ok(r) if r.status == RunStatus::WaitingTakeover => {
                    if unattended.is_some_and(|limit| since.elapsed() >= limit) && matches!(self.engine.control_of(&self.bot.id).await, Ok(None)) {
                        // Control that lapsed ends the paused run with its own reason; else
                        // nobody took the screen at all.
                        if let Err(e) = self.engine.end_lapsed_control().await {
                            tracing::warn!("ending lapsed control: {e}");
                        }
                        let why = "paused, but nobody took the bot's screen for as long as control lasts";
                        let _ = self
                            .engine
                            .inner
                            .store
                            .transition_run(&self.run.id, RunStatus::WaitingTakeover, RunStatus::Cancelled, self.engine.now(), None, Some(why))
                            .await;
                    }
                }
                Ok(r) if r.status == RunStatus::Running => {
                    self.engine.emit(RunEvent::Status {
                        bot: self.bot_id(),
                        run_id: self.run.id.clone(),
                        status: RunStatus::Running,
                        error: None,
                        failure: None,
                    });
                    return Ok(r);
                }
                Ok(r) => return Err(format!("the run is {} now", r.status)),
                Err(e) => tracing::warn!("reading the run while waiting: {e}"),
            }
        }
    }

    /// Pause and take: at a step boundary, a run the person asked to pause waits for them; once
    /// they hand the screen back, the model is told for how long they had it and what they said.
    pub(super) async fn pause_if_asked(&self, cancel: &CancellationToken) -> Option<String> {
        let run = self.engine.inner.store.run(&self.run.id).await.ok()?;
        if run.pause_requested_at.is_none() || run.status != RunStatus::Running || cancel.is_cancelled() {
            return None;
        }
        let paused = std::time::Instant::now();
        if let Err(e) = self.wait_for_person().await {
            tracing::warn!(run = %self.run.id, "could not pause the run: {e}");
            return None;
        }
        self.message(MessageRole::System, PAUSED).await;
        self.engine.emit(RunEvent::Status {
            bot: self.bot_id(),
            run_id: self.run.id.clone(),
            status: RunStatus::WaitingTakeover,
            error: Some(super::PAUSED_FOR_YOU.into()),
            failure: None,
        });
        let unattended = Duration::from_millis(self.engine.policy().control_ttl.max(0) as u64);
        let r = match self.until_handed_back(cancel, Some(unattended)).await {
            Ok(r) => r,
            Err(why) => {
                // Stopped, or ended while paused (control expired): no further model call.
                tracing::info!(run = %self.run.id, "a paused run ends: {why}");
                self.stop.cancel();
                return None;
            }
        };
        let held = format_span(paused.elapsed());
        self.message(MessageRole::System, &format!("{RESUMED}{held}.{}", said(&r))).await;
        Some(format!(
            "The person paused you, took control of the screen for {held} and handed it back.{} The screen may have changed: look at it again before going on.",
            said(&r)
        ))
    }
}

/// The person's note at handback, as a sentence to append (empty without one).
fn said(r: &Run) -> String {
    match r.handback_note.as_deref().map(str::trim) {
        Some(n) if !n.is_empty() => format!(" Their note: \"{n}\"."),
        _ => String::new(),
    }
}

/// A span as a person says it: "45 s", "2 min 14 s", "1 h 3 min".
pub(crate) fn format_span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod span_tests {
    #[test]
    fn spans_read_as_a_person_says_them() {
        let f = |s| super::format_span(std::time::Duration::from_secs(s));
        assert_eq!([f(0), f(59), f(134), f(3599), f(3780)], ["0 s", "59 s", "2 min 14 s", "59 min 59 s", "1 h 3 min"]);
    }
}
