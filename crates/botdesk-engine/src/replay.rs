//! What a replay draws: each screen action of a run as a mark at the screen pixel where it
//! happened (a click ring, a drag path, typed text, keys), stored with the tool call that did it.

use botdesk_core::action::{Action, Button, Direction};
use serde::{Deserialize, Serialize};

/// One action, as a replay draws it; coordinates are pixels of the screen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Mark {
    Click {
        x: u32,
        y: u32,
        button: String,
    },
    /// The pointer moved (or a button was pressed or let go) here.
    Move {
        x: u32,
        y: u32,
    },
    Drag {
        x: u32,
        y: u32,
        to_x: u32,
        to_y: u32,
    },
    Type {
        text: String,
    },
    /// Keys pressed together, as the model named them ("ctrl+l"); `held` for a key held down.
    Key {
        keys: String,
        held: bool,
    },
    Scroll {
        x: Option<u32>,
        y: Option<u32>,
        direction: String,
        amount: u32,
    },
}

/// What a tool call did on the screen, and when (ms since the epoch).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct Acted {
    pub at: i64,
    pub marks: Vec<Mark>,
}

fn button(b: Button) -> String {
    serde_json::to_value(b).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_else(|| "left".into())
}

fn direction(d: Direction) -> String {
    serde_json::to_value(d).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

/// The marks of a checked batch (pixels of the screen); `redact` is applied to typed text.
pub(crate) fn marks_of(batch: &[Action], redact: impl Fn(&str) -> String) -> Vec<Mark> {
    batch
        .iter()
        .filter_map(|a| match a {
            Action::Click { x, y, button: b } => Some(Mark::Click { x: *x, y: *y, button: button(*b) }),
            Action::Move { x, y } => Some(Mark::Move { x: *x, y: *y }),
            Action::Down { at: Some((x, y)), .. } | Action::Up { at: Some((x, y)), .. } => Some(Mark::Move { x: *x, y: *y }),
            Action::Down { at: None, .. } | Action::Up { at: None, .. } | Action::Wait { .. } | Action::KeyUp { .. } => None,
            Action::Drag { x, y, to_x, to_y, .. } => Some(Mark::Drag { x: *x, y: *y, to_x: *to_x, to_y: *to_y }),
            Action::Type { text } => Some(Mark::Type { text: redact(text) }),
            Action::Key { key, modifiers } => {
                let mut keys = modifiers.clone();
                keys.push(key.clone());
                Some(Mark::Key { keys: keys.join("+"), held: false })
            }
            Action::KeyDown { key } => Some(Mark::Key { keys: key.clone(), held: true }),
            Action::Scroll { at, direction: d, amount } => {
                Some(Mark::Scroll { x: at.map(|p| p.0), y: at.map(|p| p.1), direction: direction(*d), amount: *amount })
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_becomes_marks_with_typed_secrets_redacted() {
        let batch = vec![
            Action::Click { x: 10, y: 20, button: Button::Left },
            Action::Type { text: "hunter2 and more".into() },
            Action::Key { key: "l".into(), modifiers: vec!["ctrl".into()] },
            Action::Wait { ms: 5 },
            Action::Drag { x: 1, y: 2, to_x: 3, to_y: 4, button: Button::Left },
        ];
        let marks = marks_of(&batch, |t| t.replace("hunter2", "[redacted]"));
        assert_eq!(
            marks,
            [
                Mark::Click { x: 10, y: 20, button: "left".into() },
                Mark::Type { text: "[redacted] and more".into() },
                Mark::Key { keys: "ctrl+l".into(), held: false },
                Mark::Drag { x: 1, y: 2, to_x: 3, to_y: 4 },
            ]
        );
    }
}
