//! Page-browser requests: URL rules, actions by element ref, and the profile folder of a bot.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::types::BotId;

pub const MAX_BROWSER_ACTIONS: usize = 24;

/// One DOM-level action on an element from the latest snapshot (`e1`, `e2`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowserAction {
    pub action: BrowserActionKind,
    #[serde(rename = "ref")]
    pub element: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BrowserActionKind {
    Click,
    Fill,
    Type,
}

/// A bot's Chromium profile folder: keyed by bot, never by display slot.
pub fn profile_name(bot: &BotId) -> String {
    format!("chromium-bot-{}", &hex::encode(Sha256::digest(bot.as_str().as_bytes()))[..32])
}

/// Only http(s) URLs without embedded credentials are navigated to.
pub fn check_url(url: &str) -> Result<(), String> {
    let fallback = " Fall back to computer_act if you must reach it another way.";
    let (scheme, rest) = url.split_once("://").ok_or_else(|| format!("{url:?} is not an absolute http(s) URL.{fallback}"))?;
    if !matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https") {
        return Err(format!("only http and https URLs can be opened, not {scheme}:.{fallback}"));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err(format!("URLs with embedded credentials are refused.{fallback}"));
    }
    if authority.is_empty() || url.chars().any(|c| c.is_control() || c == ' ') {
        return Err(format!("{url:?} is not a valid URL.{fallback}"));
    }
    Ok(())
}

/// Parses and checks the JSON array of a browser_act call.
pub fn parse_actions(json: &serde_json::Value) -> Result<Vec<BrowserAction>, String> {
    let actions: Vec<BrowserAction> = serde_json::from_value(json.clone()).map_err(|e| format!("bad browser actions: {e}"))?;
    if actions.len() > MAX_BROWSER_ACTIONS {
        return Err(format!("at most {MAX_BROWSER_ACTIONS} browser actions per call; this one has {}. Nothing was done", actions.len()));
    }
    for (i, a) in actions.iter().enumerate() {
        let ok_ref = a.element.len() > 1 && a.element.starts_with('e') && a.element[1..].chars().all(|c| c.is_ascii_digit());
        if !ok_ref {
            return Err(format!("action {i}: {:?} is not an element ref like e3", a.element));
        }
        if a.action != BrowserActionKind::Click && a.text.is_none() {
            return Err(format!("action {i}: fill and type need text"));
        }
    }
    Ok(actions)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn urls_and_profiles() {
        assert!(check_url("https://example.org/a?b#c").is_ok());
        assert!(check_url("http://127.0.0.1:8123/").is_ok());
        assert!(check_url("file:///etc/passwd").unwrap_err().contains("only http and https"));
        assert!(check_url("javascript:alert(1)").is_err());
        assert!(check_url("https://user:pw@example.org/").unwrap_err().contains("credentials"));
        assert!(check_url("https://").is_err());
        let p = profile_name(&BotId::new("b1"));
        assert_eq!(p.len(), "chromium-bot-".len() + 32);
        assert_ne!(p, profile_name(&BotId::new("b2")));
        assert!(parse_actions(&serde_json::json!([{"action": "click", "ref": "e1"}])).is_ok());
        assert!(parse_actions(&serde_json::json!([{"action": "fill", "ref": "e1"}])).is_err());
        assert!(parse_actions(&serde_json::json!([{"action": "click", "ref": "x"}])).is_err());
    }
}
