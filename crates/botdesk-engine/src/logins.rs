//! Logins the model never sees: the person saves a site, a user name, a password and optionally a
//! one-time-code seed for a bot (the secrets go to the OS keyring, the rest to the store); the
//! bot's `fill_login(site)` has the engine fill the page's form over DevTools, only when the page
//! is on that site. The model is told what was filled, never with what; the run's redactor holds
//! the secrets, so a page that shows them back reaches nobody.

use botdesk_core::login::{self, LoginSite, Secret};
use botdesk_core::BrowserCommand;
use botdesk_store::BotLogin;
use serde::{Deserialize, Serialize};

use crate::{models::keyring_entry, Engine, EngineError, ErrorCode, Result};

/// What the keyring keeps for one login.
#[derive(Serialize, Deserialize)]
struct Kept {
    password: String,
    #[serde(default)]
    code_seed: Option<String>,
}

fn entry_name(bot: &botdesk_core::BotId, site: &LoginSite) -> String {
    format!("login:{bot}:{site}")
}

/// What the person gives to save a login.
pub struct NewLogin {
    pub site: String,
    pub username: String,
    pub password: String,
    /// Base32, as authenticator apps show it.
    pub code_seed: Option<String>,
}

impl Engine {
    /// Saves (or replaces) a bot's login for a site.
    pub async fn add_login(&self, bot: &crate::BotRef, new: NewLogin) -> Result<BotLogin> {
        let (bot, _) = self.bot_and_computer(&bot.id).await?;
        let site = LoginSite::parse(&new.site).map_err(EngineError::invalid)?;
        let username = new.username.trim().to_string();
        if username.is_empty() || username.len() > 320 || username.chars().any(char::is_control) {
            return Err(EngineError::invalid("give the login's user name (at most 320 characters, on one line)"));
        }
        if new.password.is_empty() || new.password.len() > login::MAX_SECRET || new.password.contains(['\n', '\r']) {
            return Err(EngineError::invalid(format!("the password is 1 to {} bytes on one line", login::MAX_SECRET)));
        }
        let code_seed = new.code_seed.map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
        if let Some(seed) = &code_seed {
            if seed.len() > login::MAX_SECRET {
                return Err(EngineError::invalid("the one-time-code seed is too long"));
            }
            login::totp_seed(seed).map_err(EngineError::invalid)?;
        }
        let kept = serde_json::to_string(&Kept { password: new.password, code_seed: code_seed.clone() }).expect("strings serialize");
        keyring_entry(self, entry_name(&bot.id, &site), move |e| e.set_password(&kept)).await?;
        let saved = BotLogin { site: site.to_string(), username, has_code: code_seed.is_some(), created_at: self.now() };
        self.inner.store.put_bot_login(&bot.id, &saved).await?;
        let code = if saved.has_code { " and a one-time-code seed" } else { "" };
        self.guardrail_activity(&bot, None, "login", &format!("login saved for {site} (user {}{code})", saved.username)).await;
        Ok(saved)
    }

    /// A bot's saved logins (sites and user names; never their secrets).
    pub async fn logins(&self, bot: &crate::BotRef) -> Result<Vec<BotLogin>> {
        let (bot, _) = self.bot_and_computer(&bot.id).await?;
        Ok(self.inner.store.bot_logins(&bot.id).await?)
    }

    /// Forgets a bot's login for a site (from the keyring too).
    pub async fn remove_login(&self, bot: &crate::BotRef, site: &str) -> Result<()> {
        let (bot, _) = self.bot_and_computer(&bot.id).await?;
        let site = LoginSite::parse(site).map_err(EngineError::invalid)?;
        if !self.inner.store.remove_bot_login(&bot.id, site.origin()).await? {
            return Err(EngineError::new(ErrorCode::NotFound, format!("{} has no login for {site}", bot.name)));
        }
        self.forget_login_secret(&bot.id, &site).await;
        self.guardrail_activity(&bot, None, "login", &format!("login for {site} removed")).await;
        Ok(())
    }

    async fn forget_login_secret(&self, bot: &botdesk_core::BotId, site: &LoginSite) {
        let gone = keyring_entry(self, entry_name(bot, site), |e| match e.delete_credential() {
            Err(keyring_core::Error::NoEntry) => Ok(()),
            other => other,
        })
        .await;
        if let Err(e) = gone {
            tracing::warn!(%bot, "the keyring kept a removed login's secrets: {e}");
        }
    }

    /// The sites of a bot's saved logins (none when they cannot be read).
    async fn login_sites(&self, bot: &botdesk_core::BotId) -> Vec<LoginSite> {
        self.inner.store.bot_logins(bot).await.unwrap_or_default().iter().filter_map(|l| LoginSite::parse(&l.site).ok()).collect()
    }

    /// Forgets every login of a bot being removed.
    pub(crate) async fn forget_logins(&self, bot: &botdesk_core::BotId) {
        for site in self.login_sites(bot).await {
            self.forget_login_secret(bot, &site).await;
        }
    }

    async fn login_secret(&self, bot: &botdesk_core::BotId, site: &LoginSite) -> Result<Kept> {
        let text = keyring_entry(self, entry_name(bot, site), |e| e.get_password()).await?;
        serde_json::from_str(&text)
            .map_err(|_| EngineError::new(ErrorCode::Internal, format!("the keyring's entry for the login on {site} is damaged: save the login again")))
    }

    /// The secrets of a bot's logins, for its run's redactor.
    pub(crate) async fn login_secrets(&self, bot: &botdesk_core::BotId) -> Vec<String> {
        let mut out = vec![];
        for site in self.login_sites(bot).await {
            match self.login_secret(bot, &site).await {
                Ok(k) => out.extend(std::iter::once(k.password).chain(k.code_seed)),
                Err(e) => tracing::warn!(%bot, "a login's secrets could not be read for redaction: {e}"),
            }
        }
        out
    }

    /// Fills the login form of the page in the bot's browser with its saved login for `site`,
    /// when the page is on that site; says what it filled (never with what).
    pub async fn fill_login(&self, bot: &crate::BotRef, site: &str) -> Result<String> {
        let (b, computer) = self.bot_and_computer(&bot.id).await?;
        let saved = self.inner.store.bot_logins(&b.id).await?;
        let site = LoginSite::parse(site).map_err(EngineError::invalid)?;
        let Some(l) = saved.iter().find(|l| l.site == site.origin()) else {
            let sites: Vec<&str> = saved.iter().map(|l| l.site.as_str()).collect();
            let have = if sites.is_empty() { "none".to_string() } else { sites.join(", ") };
            return Err(EngineError::new(ErrorCode::NotFound, format!("the person saved no login for {site} (saved: {have})")));
        };
        let kept = self.login_secret(&b.id, &site).await?;
        let code = match &kept.code_seed {
            Some(seed) => Some(login::totp(&login::totp_seed(seed).map_err(EngineError::invalid)?, (self.now() / 1000).max(0) as u64)),
            None => None,
        };
        let command = BrowserCommand::FillLogin { origin: site.to_string(), user: l.username.clone(), password: Secret::new(kept.password), code };
        let page = self.browser_of(&b, &computer, command).await?;
        let at = page["origin"].as_str().unwrap_or("");
        if at != site.origin() {
            return Err(EngineError::invalid(format!(
                "the page in your browser is on {}, not {site}: nothing was filled. Open {site}'s login page first",
                if at.is_empty() { "no site" } else { at }
            )));
        }
        let filled: Vec<&str> = page["filled"].as_array().into_iter().flatten().filter_map(|f| f.as_str()).collect();
        if filled.is_empty() {
            return Err(EngineError::invalid(format!("the page on {site} has no login field to fill (no password, user name or code field is visible)")));
        }
        let mut said = format!("Filled the {} on {site} with the login the person saved (user {}).", filled.join(", "), l.username);
        if page["code_wanted"] == true {
            said.push_str(" The page asks for a one-time code, but none is saved for this login: ask the person with request_takeover.");
        }
        said.push_str(" Submit the form to log in (e.g. click its log-in button).");
        Ok(said)
    }
}
