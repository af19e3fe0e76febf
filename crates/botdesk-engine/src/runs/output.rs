//! A command's output as a run keeps it: the end of it, and how much came.

use super::*;

/// The last `n` characters of `s`.
pub(super) fn tail(s: &str, n: usize) -> String {
    let count = s.chars().count();
    if count <= n {
        return s.to_string();
    }
    s.chars().skip(count - n).collect()
}

/// The end of a command's output as it comes, and how much came in all.
#[derive(Default)]
pub(super) struct OutputTail {
    pub(super) kept: Vec<u8>,
    pub(super) total: u64,
}

impl OutputTail {
    /// Bytes kept: the characters an activity keeps (up to 4 bytes each in UTF-8), and room for a
    /// secret cut at the front, so the redactor still sees it whole before the cut that is shown.
    const KEEP: usize = OUTPUT_TAIL * 4 + 4096;

    pub(super) fn push(&mut self, data: &[u8]) {
        self.total += data.len() as u64;
        self.kept.extend_from_slice(data);
        if self.kept.len() > 2 * Self::KEEP {
            self.kept.drain(..self.kept.len() - Self::KEEP);
        }
    }

    /// The kept bytes as text, secrets redacted (what the activity and the model are given).
    pub(super) fn text(&self, redactor: &Redactor) -> String {
        redactor.redact(&String::from_utf8_lossy(&self.kept))
    }
}

#[cfg(test)]
mod output_tests {
    use super::{tail, OutputTail, Redactor, OUTPUT_TAIL};
    use proptest::prelude::*;

    proptest! {
        /// However a command's output arrives, the tail holds its last bytes (at least `KEEP` of
        /// them, at most twice that) and the count is exact.
        #[test]
        fn the_tail_is_the_end_of_the_output(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40_000), 0..12)) {
            let mut t = OutputTail::default();
            let all: Vec<u8> = chunks.concat();
            for c in &chunks {
                t.push(c);
            }
            prop_assert_eq!(t.total, all.len() as u64);
            prop_assert!(t.kept.len() <= 2 * OutputTail::KEEP);
            prop_assert!(t.kept.len() >= all.len().min(OutputTail::KEEP));
            prop_assert!(all.ends_with(&t.kept));
        }

        /// Whatever bytes a command prints, and wherever a secret lands in them (split across
        /// chunks, beside broken UTF-8), the activity's text is at most `OUTPUT_TAIL` characters
        /// and never shows the secret.
        #[test]
        fn the_activity_text_is_bounded_and_never_shows_a_secret(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..30_000), 0..8),
            at in any::<prop::sample::Index>(),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..4),
        ) {
            const SECRET: &str = "sk-test-0123456789abcdef";
            let mut all: Vec<u8> = chunks.concat();
            let at = at.index(all.len() + 1);
            all.splice(at..at, SECRET.bytes());
            let mut bounds: Vec<usize> = cuts.iter().map(|c| c.index(all.len() + 1)).collect();
            bounds.sort();
            let mut t = OutputTail::default();
            let mut from = 0;
            for b in bounds.into_iter().chain([all.len()]) {
                t.push(&all[from..b]);
                from = b;
            }
            let shown = tail(&t.text(&Redactor::new([SECRET.to_string()])), OUTPUT_TAIL);
            prop_assert!(shown.chars().count() <= OUTPUT_TAIL);
            // Nor its end, as when a secret cut at the front of what is kept were shown.
            prop_assert!(!shown.contains(&SECRET[8..]), "the secret is shown");
        }
    }
}
