//! A run's questions to the person (a safety check its model's provider put on an action, or
//! something the bot's approvals name): the run asks, waits for the answer from any process (the
//! app, `botdesk approve|deny`), and goes on or not. Nothing answers for the person; a question
//! nobody answers for as long as control of a screen lasts is declined.

use super::*;
use botdesk_core::Verdict;

/// How the person answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Answer {
    pub verdict: Verdict,
    pub note: Option<String>,
}

impl Answer {
    pub fn allow(&self) -> bool {
        self.verdict.allows()
    }
}

impl RunHost {
    /// Asks the person `question` (of `kind`) and waits for the answer; None when the run was
    /// stopped meanwhile (the question is closed as declined).
    pub(super) async fn ask(&self, kind: &str, question: &str, cancel: &CancellationToken) -> Option<Answer> {
        let store = &self.engine.inner.store;
        let question = self.redactor.redact(question);
        let id = match store.ask(&self.run.id, &self.bot.id, kind, &question, self.engine.now()).await {
            Ok(id) => id,
            Err(e) => {
                tracing::error!(run = %self.run.id, "a question to the person was not stored: {e}");
                return None;
            }
        };
        // A safety check is the bot asking; an approval says what the bot wants.
        let said = if kind == "safety_check" { format!("{} asks you: {question}", self.bot.name) } else { question.clone() };
        self.message(MessageRole::System, &said).await;
        self.engine.emit(RunEvent::Question { bot: self.bot_id(), run_id: self.run.id.clone(), id, kind: kind.into(), question: question.clone() });
        let expires = tokio::time::Instant::now() + Duration::from_millis(self.engine.policy().control_ttl.max(1) as u64);
        let answered = loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                _ = cancel.cancelled() => break None,
            }
            if tokio::time::Instant::now() >= expires {
                let why = format!("nobody answered within {}", super::format_span(Duration::from_millis(self.engine.policy().control_ttl.max(0) as u64)));
                let _ = store.answer(id, Verdict::Deny, Some(&why), self.engine.now()).await;
            }
            match store.question(id).await {
                Ok(q) if q.answer.is_some() => {
                    break Some(Answer { verdict: q.answer.as_deref().and_then(Verdict::parse).unwrap_or(Verdict::Deny), note: q.note });
                }
                Ok(_) => {}
                Err(e) => tracing::warn!("reading a question while waiting: {e}"),
            }
        };
        if answered.is_none() {
            let _ = store.close_questions(&self.run.id, "the run was stopped", self.engine.now()).await;
        }
        if let Some(a) = &answered {
            let note = a.note.as_deref().map(|n| format!(": {n}")).unwrap_or_default();
            let said = match a.verdict {
                Verdict::Allow => "allowed it",
                Verdict::Always => "allowed it, and the same on this site from now on",
                Verdict::Deny => "declined",
            };
            self.message(MessageRole::System, &format!("You {said}{note}.")).await;
        }
        self.engine.emit(RunEvent::Answered { bot: self.bot_id(), run_id: self.run.id.clone(), id, allow: answered.as_ref().is_some_and(Answer::allow) });
        answered
    }

    /// A call behind safety checks: the person is asked; allowed, it is carried out, declined,
    /// the run stops (the provider accepts the call's answer only with the checks acknowledged).
    pub(super) async fn safety_checked(&self, call_id: &str, checks: &[SafetyCheck], then: Tool, cancel: &CancellationToken) -> ToolOutput {
        let said: Vec<String> = checks
            .iter()
            .map(|c| if c.message.trim().is_empty() { format!("a safety check ({})", c.code) } else { format!("{} ({})", c.message.trim(), c.code) })
            .collect();
        let question = format!("the model's provider flagged its next action: {}. Allow it to go on?", said.join("; "));
        match self.ask("safety_check", &question, cancel).await {
            Some(a) if a.allow() => Box::pin(self.execute(call_id, then, cancel)).await,
            Some(Answer { note, .. }) => {
                let note = note.map(|n| format!(" ({n})")).unwrap_or_default();
                *self.fatal.lock().unwrap() = Some((RunFailure::Declined, format!("you declined the provider's safety check{note}")));
                self.stop.cancel();
                ToolOutput::error("the person declined the safety check; the run stops")
            }
            None => ToolOutput::error("the run was stopped while the person was asked"),
        }
    }
}

impl Engine {
    /// The question a bot's run waits on, if any.
    pub async fn open_question(&self, bot: &crate::BotRef) -> Result<Option<botdesk_store::Question>> {
        let (bot, _) = self.bot_and_computer(&bot.id).await?;
        Ok(self.inner.store.open_question(&bot.id).await?)
    }

    /// Answers the question a bot's run waits on (from any process): allow (once or always for
    /// the site it is about), or decline with an optional note the model is told.
    pub async fn answer_question(&self, bot: &crate::BotRef, verdict: Verdict, note: Option<&str>) -> Result<botdesk_store::Question> {
        let (b, _) = self.bot_and_computer(&bot.id).await?;
        let q = self
            .inner
            .store
            .open_question(&b.id)
            .await?
            .ok_or_else(|| EngineError::new(ErrorCode::NotFound, format!("{} has nothing waiting for your answer", b.name)))?;
        let note = note.map(str::trim).filter(|n| !n.is_empty());
        if note.is_some_and(|n| n.chars().count() > crate::MAX_NOTE) {
            return Err(EngineError::invalid(format!("a note is at most {} characters", crate::MAX_NOTE)));
        }
        Ok(self.inner.store.answer(q.id, verdict, note, self.now()).await?)
    }
}
