//! A run's approvals: before a shell command its bot's approvals name, once its spend passes the
//! amount set, and after each action on the screen or in the browser (what the computer held
//! there: a download, a file chooser, a form sent to a listed domain, a page on a new domain),
//! the person is asked, and the model is told the answer. Each question and answer is in the
//! bot's activity (and so in the run's replay).

use std::sync::atomic::Ordering;

use botdesk_core::{ApprovalKind, Approvals, PendingApproval, Verdict};

use super::ask::Answer;
use super::*;
use crate::approvals::APPROVAL_ACTIVITY;

/// Tools that work on the screen or the browser: what a page does meanwhile may be held.
fn on_screen(tool: &Tool) -> bool {
    matches!(
        tool,
        Tool::Observe
            | Tool::Act { .. }
            | Tool::Wait { .. }
            | Tool::HoldKey { .. }
            | Tool::BrowserNavigate { .. }
            | Tool::BrowserSnapshot
            | Tool::BrowserAct { .. }
            | Tool::OpenPath { .. }
            | Tool::LaunchApp { .. }
            | Tool::FillLogin { .. }
    )
}

/// What the bot wants to do, as the question and the model's answer say it.
fn describe(p: &PendingApproval) -> String {
    match p.kind {
        ApprovalKind::Download => format!("download {}", p.url),
        ApprovalKind::Upload => format!("upload a file on {}", p.host),
        ApprovalKind::Form => format!("submit the form on {} ({})", p.host, p.url),
        ApprovalKind::Page => format!("open a page on a new site, {} ({})", p.host, p.url),
        ApprovalKind::Command | ApprovalKind::Spend => p.url.clone(),
    }
}

fn with_note(note: &Option<String>) -> String {
    note.as_deref().map(|n| format!(" Their note: \"{n}\".")).unwrap_or_default()
}

impl RunHost {
    /// The bot's approvals as they stand now (the person may change them during the run).
    async fn approvals(&self) -> Approvals {
        self.engine.approvals_of(&self.bot.id).await.unwrap_or_else(|e| {
            tracing::error!(bot = %self.bot.id, "reading the bot's approvals failed: {e}");
            Approvals::default()
        })
    }

    /// Asks the person whether the bot may `what`; the question and its answer go to the activity.
    async fn ask_approval(&self, kind: ApprovalKind, what: &str, cancel: &CancellationToken) -> Option<Answer> {
        let answer = self.ask(kind.as_str(), &format!("{} wants to {what}", self.bot.name), cancel).await;
        let said = match &answer {
            Some(Answer { verdict: Verdict::Allow, .. }) => "allowed once".to_string(),
            Some(Answer { verdict: Verdict::Always, .. }) => "allowed, always on this site".to_string(),
            Some(Answer { note, .. }) => format!("denied{}", note.as_deref().map(|n| format!(" ({n})")).unwrap_or_default()),
            None => "not answered: the run was stopped".to_string(),
        };
        let line = self.redactor.redact(&format!("{}: {what}: {said}", kind.as_str()));
        self.engine.guardrail_activity(&self.bot, Some(&self.run.id), APPROVAL_ACTIVITY, &line).await;
        answer
    }

    /// Before a shell command: None when it may run; else what the model is told instead.
    pub(super) async fn approve_command(&self, command: &str, cancel: &CancellationToken) -> Option<ToolOutput> {
        let approvals = self.approvals().await;
        let pattern = approvals.command_needs(command)?.to_string();
        let what = format!("run a command matching `{pattern}`: {command}");
        match self.ask_approval(ApprovalKind::Command, &what, cancel).await {
            Some(a) if a.allow() => None,
            Some(Answer { note, .. }) => Some(ToolOutput::error(format!("The person denied running this command. It did not run.{}", with_note(&note)))),
            None => Some(ToolOutput::error("the run was stopped while the person was asked")),
        }
    }

    /// At a step boundary: once the run's spend passed the amount set, asks once whether it may
    /// go on. Denied, the run stops. Returns what the model is told when allowed.
    pub(super) async fn approve_spend(&self, cancel: &CancellationToken) -> Option<String> {
        let limit = self.approvals().await.spend_usd?;
        let spent = self.prices.map(|p| p.cost(&self.usage.lock().unwrap()))?;
        if spent <= limit || self.spend_asked.swap(true, Ordering::SeqCst) {
            return None;
        }
        let what = format!("go on past ${limit:.2} of spend on this run (it has spent ${spent:.2})");
        match self.ask_approval(ApprovalKind::Spend, &what, cancel).await {
            Some(a) if a.allow() => Some(format!("The person allowed this run to spend more than ${limit:.2}.")),
            Some(Answer { note, .. }) => {
                let note = note.map(|n| format!(" ({n})")).unwrap_or_default();
                *self.fatal.lock().unwrap() = Some((RunFailure::Declined, format!("you declined spending more than ${limit:.2} on this run{note}")));
                self.stop.cancel();
                None
            }
            None => None,
        }
    }

    /// Before a tool on the screen or the browser: the computer watches the bot's browser for
    /// what its approvals name. Returns them, for [`Self::settle_browser`] after the tool.
    pub(super) async fn watch_before(&self, tool: &Tool) -> Option<Approvals> {
        if !on_screen(tool) {
            return None;
        }
        let approvals = self.approvals().await;
        if !approvals.watches_browser() {
            // Turned off during the run: the browser is watched no more.
            if self.watching.swap(false, Ordering::SeqCst) {
                self.stop_watching().await;
            }
            return None;
        }
        match self.engine.watch_browser(&self.bot, Some(&approvals)).await {
            Ok(_) => self.watching.store(true, Ordering::SeqCst),
            Err(e) => tracing::warn!(run = %self.run.id, "watching the browser for approvals failed: {e}"),
        }
        Some(approvals)
    }

    /// After the tool: asks about each thing the browser holds and lets it go on or refuses it;
    /// returns what the model is told. What an allowed request leads to (a form whose answer is a
    /// download) is asked about in turn.
    pub(super) async fn settle_browser(&self, mut approvals: Approvals, cancel: &CancellationToken) -> Vec<String> {
        let mut told = vec![];
        for _ in 0..20 {
            let held = match self.engine.watch_browser(&self.bot, Some(&approvals)).await {
                Ok(held) => held,
                Err(e) => {
                    tracing::warn!(run = %self.run.id, "reading what the browser holds failed: {e}");
                    break;
                }
            };
            if held.is_empty() {
                break;
            }
            for p in held {
                let what = describe(&p);
                let answer = self.ask_approval(p.kind, &what, cancel).await;
                let allow = answer.as_ref().is_some_and(Answer::allow);
                if let Err(e) = self.engine.answer_browser(&self.bot, p.id, allow).await {
                    tracing::warn!(run = %self.run.id, "answering the browser failed: {e}");
                }
                let then = if p.kind == ApprovalKind::Upload { "open the file chooser again to pick the file" } else { "it went on" };
                match answer {
                    Some(Answer { verdict: Verdict::Always, .. }) => {
                        match self.engine.allow_always(&self.bot, p.kind, &p.host).await {
                            Ok(a) => approvals = a,
                            Err(e) => tracing::warn!(run = %self.run.id, "keeping an answer for good failed: {e}"),
                        }
                        told.push(format!("The person allowed you to {what}, and the same on {} from now on: {then}.", p.host));
                    }
                    Some(Answer { verdict: Verdict::Allow, .. }) => told.push(format!("The person allowed you to {what}: {then}.")),
                    Some(Answer { note, .. }) => told.push(format!("The person denied that you {what}. It did not happen.{}", with_note(&note))),
                    None => return told,
                }
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        told
    }

    /// The browser is watched no more (the run ended, or its approvals no longer need it); what
    /// it still held is refused.
    pub(super) async fn stop_watching(&self) {
        if let Err(e) = self.engine.watch_browser(&self.bot, None).await {
            tracing::warn!(run = %self.run.id, "ending the browser's watch failed: {e}");
        }
    }
}
