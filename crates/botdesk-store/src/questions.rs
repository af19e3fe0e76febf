//! A run's questions to the person: asked by the run, answered by any process (the app or
//! `botdesk approve|deny`); the run waits for the answer.

use botdesk_core::BotId;
use serde::Serialize;

use crate::{Result, Store, StoreError};

/// One question and, once given, its answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct Question {
    pub id: i64,
    pub run_id: String,
    pub bot_id: String,
    /// What asks: `safety_check` (a check the model's provider put on an action), or what the
    /// bot's approvals name (`download`, `upload`, `form`, `page`, `command`, `spend`).
    pub kind: String,
    pub question: String,
    pub asked_at: i64,
    /// `allow`, `always` (allow, and on this site from now on) or `deny`; None while it waits.
    pub answer: Option<String>,
    pub note: Option<String>,
}

impl Store {
    /// Asks the person on behalf of a run; returns the question's id.
    pub async fn ask(&self, run_id: &str, bot: &BotId, kind: &str, question: &str, now: i64) -> Result<i64> {
        let b = bot.as_str();
        let done = sqlx::query!("INSERT INTO questions (run_id, bot_id, kind, question, asked_at) VALUES (?1, ?2, ?3, ?4, ?5)", run_id, b, kind, question, now)
            .execute(&self.pool)
            .await?;
        Ok(done.last_insert_rowid())
    }

    pub async fn question(&self, id: i64) -> Result<Question> {
        let r = sqlx::query!(
            r#"SELECT id AS "id!: i64", run_id, bot_id, kind, question, asked_at AS "asked_at: i64", answer, note FROM questions WHERE id = ?1"#,
            id
        )
        .fetch_optional(&self.pool)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("question {id}")))?;
        Ok(Question { id: r.id, run_id: r.run_id, bot_id: r.bot_id, kind: r.kind, question: r.question, asked_at: r.asked_at, answer: r.answer, note: r.note })
    }

    /// The bot's question that waits for an answer (its newest), if any.
    pub async fn open_question(&self, bot: &BotId) -> Result<Option<Question>> {
        let b = bot.as_str();
        let id = sqlx::query_scalar!(r#"SELECT id AS "id!: i64" FROM questions WHERE bot_id = ?1 AND answer IS NULL ORDER BY id DESC LIMIT 1"#, b)
            .fetch_optional(&self.pool)
            .await?;
        match id {
            Some(id) => Ok(Some(self.question(id).await?)),
            None => Ok(None),
        }
    }

    /// Answers a question that still waits (the first answer stands: a second is refused).
    pub async fn answer(&self, id: i64, verdict: botdesk_core::Verdict, note: Option<&str>, now: i64) -> Result<Question> {
        let answer = verdict.as_str();
        let done = sqlx::query!("UPDATE questions SET answer = ?2, note = ?3, answered_at = ?4 WHERE id = ?1 AND answer IS NULL", id, answer, note, now)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::Conflict(format!("question {id} was answered already")));
        }
        self.question(id).await
    }

    /// Closes the questions of a run that ended without their answer (denied, with why).
    pub async fn close_questions(&self, run_id: &str, why: &str, now: i64) -> Result<()> {
        sqlx::query!("UPDATE questions SET answer = 'deny', note = ?2, answered_at = ?3 WHERE run_id = ?1 AND answer IS NULL", run_id, why, now)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
