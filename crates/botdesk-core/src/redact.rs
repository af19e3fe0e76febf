//! Secret redaction: every run secret (API keys, tokens) is replaced by `[redacted]` before text is
//! stored, shown or logged.

pub const REDACTED: &str = "[redacted]";

/// Shortest value treated as a secret; shorter ones would redact ordinary words.
pub const MIN_SECRET_LEN: usize = 6;

#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Vec<String>,
}

impl Redactor {
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Self {
        let mut secrets: Vec<String> = secrets.into_iter().filter(|s| s.len() >= MIN_SECRET_LEN).collect();
        // Longest first, so a secret containing another is replaced whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Self { secrets }
    }

    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for s in &self.secrets {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), REDACTED);
            }
        }
        out
    }

    /// Length of the longest secret: a streaming caller holds back this many bytes minus one.
    pub fn longest(&self) -> usize {
        self.secrets.first().map_or(0, String::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn redacts_every_occurrence_and_ignores_short_values() {
        let r = Redactor::new(["sk-secret-123".to_string(), "abc".to_string(), "sk-secret".to_string()]);
        assert_eq!(r.redact("a sk-secret-123 b sk-secret c abc"), "a [redacted] b [redacted] c abc");
        assert_eq!(r.longest(), 13);
    }
}
