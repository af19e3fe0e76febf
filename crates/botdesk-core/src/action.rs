//! Desktop actions: the JSON the model's `computer_act` and the CLI's `act` take.
//! Validation happens here, before anything reaches a screen.

use serde::{Deserialize, Serialize};

pub const MAX_BATCH: usize = 24;
pub const MAX_COORD: f64 = 100_000.0;
pub const DEFAULT_SETTLE_MS: u64 = 300;
/// The longest a batch waits for the screen to change and then stay still.
pub const SETTLE_CAP_MS: u64 = 3_000;

/// What the screen did after a batch of actions. A batch waits until the screen changed and then
/// stayed still for the settle time, or until [`SETTLE_CAP_MS`]; `ms` counts from the batch's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "settled", rename_all = "snake_case")]
pub enum Settled {
    /// Not watched (a settle time of 0).
    Unwatched,
    /// It changed, then stayed still for the settle time.
    Still { ms: u64 },
    /// It was still changing at the cap.
    Changing { ms: u64 },
    /// Nothing visible changed within the cap (the pointer is drawn into the screen, so a move
    /// to a new place counts as a change).
    Unchanged { ms: u64 },
}

impl Settled {
    /// One sentence for the model and the person.
    pub fn describe(&self) -> String {
        match self {
            Settled::Unwatched => "The screen was not watched (settle_ms 0).".into(),
            Settled::Still { ms } => format!("The screen changed and was still {ms} ms after the last action."),
            Settled::Changing { ms } => format!("The screen was still changing {ms} ms after the last action."),
            Settled::Unchanged { ms } => format!("No visible change after {ms} ms."),
        }
    }
}
pub const MAX_WAIT_MS: u64 = 5_000;

/// Every display's size in pixels (`botdesk-display` starts Xvfb at this size).
pub const SCREEN: (u32, u32) = (1280, 800);

/// How a model gives screen coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum CoordSpace {
    /// Pixels of the screenshot it was sent (the screen's own size).
    #[default]
    #[serde(rename = "pixels")]
    Pixels,
    /// 0 to 1000 on each axis, whatever the screen's size (Qwen-VL, UI-TARS and models like them).
    #[serde(rename = "0-1000")]
    Thousandths,
}

impl CoordSpace {
    pub fn as_str(self) -> &'static str {
        match self {
            CoordSpace::Pixels => "pixels",
            CoordSpace::Thousandths => "0-1000",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pixels" => Some(CoordSpace::Pixels),
            "0-1000" => Some(CoordSpace::Thousandths),
            _ => None,
        }
    }

    /// What a model of this name was trained on: 0–1000 for UI-TARS and Qwen's vision models.
    pub fn default_for(model: &str) -> Self {
        let m = model.to_ascii_lowercase();
        if m.contains("ui-tars") || m.contains("uitars") || (m.contains("qwen") && m.contains("vl")) {
            CoordSpace::Thousandths
        } else {
            CoordSpace::Pixels
        }
    }

    /// A screen pixel in this space (what the model is told, e.g. where the cursor is).
    pub fn from_pixel(self, (x, y): (u32, u32), (w, h): (u32, u32)) -> (u32, u32) {
        match self {
            CoordSpace::Pixels => (x, y),
            CoordSpace::Thousandths => ((x * 1000 + w / 2) / w.max(1), (y * 1000 + h / 2) / h.max(1)),
        }
    }
}

/// Places a checked batch on a `w`×`h` screen: coordinates given in `space` become pixels, and a
/// coordinate outside the screen refuses the whole batch.
pub fn place(batch: &mut [Action], space: CoordSpace, (w, h): (u32, u32)) -> Result<(), ActionError> {
    // The model's index of an action (a double click became two clicks) is not kept: say which value.
    let one = |name: &str, v: &mut u32, size: u32| -> Result<(), ActionError> {
        let px = match space {
            CoordSpace::Pixels => *v,
            CoordSpace::Thousandths if *v <= 1000 => ((*v as u64 * size as u64 + 500) / 1000).min(size as u64 - 1) as u32,
            CoordSpace::Thousandths => return Err(ActionError::Outside(format!("{name} {v} is not from 0 to 1000 (this model gives coordinates from 0 to 1000 on each axis)"))),
        };
        if px >= size {
            return Err(ActionError::Outside(format!("{name} {v} is outside the screen ({name} is 0 to {} on this {w}x{h} screen)", size - 1)));
        }
        *v = px;
        Ok(())
    };
    for a in batch.iter_mut() {
        match a {
            Action::Click { x, y, .. } | Action::Move { x, y } => {
                one("x", x, w)?;
                one("y", y, h)?;
            }
            Action::Drag { x, y, to_x, to_y, .. } => {
                one("x", x, w)?;
                one("y", y, h)?;
                one("to_x", to_x, w)?;
                one("to_y", to_y, h)?;
            }
            Action::Down { at: Some((x, y)), .. } | Action::Up { at: Some((x, y)), .. } | Action::Scroll { at: Some((x, y)), .. } => {
                one("x", x, w)?;
                one("y", y, h)?;
            }
            _ => {}
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Button {
    #[default]
    Left,
    Right,
    Middle,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Up,
    Down,
    Left,
    Right,
}

/// One action as the model writes it (coordinates not yet checked).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum RawAction {
    Click { x: f64, y: f64, #[serde(default)] button: Button },
    DoubleClick { x: f64, y: f64, #[serde(default)] button: Button },
    Move { x: f64, y: f64 },
    Down { #[serde(default)] x: Option<f64>, #[serde(default)] y: Option<f64>, #[serde(default)] button: Button },
    Up { #[serde(default)] x: Option<f64>, #[serde(default)] y: Option<f64>, #[serde(default)] button: Button },
    Drag { x: f64, y: f64, to_x: f64, to_y: f64, #[serde(default)] button: Button },
    Type { text: String },
    Key { key: String, #[serde(default)] modifiers: Vec<String> },
    Scroll { #[serde(default)] x: Option<f64>, #[serde(default)] y: Option<f64>, direction: Direction, #[serde(default = "one")] amount: u32 },
    Wait { ms: u64 },
}

fn one() -> u32 {
    1
}

/// A checked action: integer pixel coordinates, bounded amounts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Action {
    Click { x: u32, y: u32, button: Button },
    Move { x: u32, y: u32 },
    Down { at: Option<(u32, u32)>, button: Button },
    Up { at: Option<(u32, u32)>, button: Button },
    Drag { x: u32, y: u32, to_x: u32, to_y: u32, button: Button },
    Type { text: String },
    Key { key: String, modifiers: Vec<String> },
    Scroll { at: Option<(u32, u32)>, direction: Direction, amount: u32 },
    Wait { ms: u64 },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActionError {
    #[error("a batch may hold at most {MAX_BATCH} actions (a double click counts as two); this one has {0}. Nothing was done")]
    TooMany(usize),
    #[error("action {index}: {why}. Nothing was done")]
    Bad { index: usize, why: String },
    #[error("{0}. Nothing was done")]
    Outside(String),
}

fn coord(index: usize, name: &str, v: f64) -> Result<u32, ActionError> {
    if !v.is_finite() || v < 0.0 || v.round() > MAX_COORD {
        return Err(ActionError::Bad { index, why: format!("{name} must be a pixel coordinate from 0 to 100000, got {v}") });
    }
    Ok(v.round() as u32)
}

fn point(index: usize, x: Option<f64>, y: Option<f64>) -> Result<Option<(u32, u32)>, ActionError> {
    match (x, y) {
        (Some(x), Some(y)) => Ok(Some((coord(index, "x", x)?, coord(index, "y", y)?))),
        (None, None) => Ok(None),
        _ => Err(ActionError::Bad { index, why: "x and y go together".into() }),
    }
}

/// Parses and checks a batch from JSON. The whole batch is refused before anything runs.
pub fn parse_batch(json: &serde_json::Value) -> Result<Vec<Action>, ActionError> {
    let items = json
        .as_array()
        .ok_or_else(|| ActionError::Bad { index: 0, why: "expected a JSON array of actions".into() })?;
    let mut raws = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let raw: RawAction = serde_json::from_value(item.clone())
            .map_err(|e| ActionError::Bad { index, why: e.to_string() })?;
        raws.push(raw);
    }
    check_batch(raws)
}

pub fn check_batch(raws: Vec<RawAction>) -> Result<Vec<Action>, ActionError> {
    let weight: usize = raws.iter().map(|a| if matches!(a, RawAction::DoubleClick { .. }) { 2 } else { 1 }).sum();
    if weight > MAX_BATCH {
        return Err(ActionError::TooMany(weight));
    }
    let mut out = Vec::with_capacity(weight);
    for (index, raw) in raws.into_iter().enumerate() {
        match raw {
            RawAction::Click { x, y, button } => out.push(Action::Click { x: coord(index, "x", x)?, y: coord(index, "y", y)?, button }),
            RawAction::DoubleClick { x, y, button } => {
                let (x, y) = (coord(index, "x", x)?, coord(index, "y", y)?);
                out.push(Action::Click { x, y, button });
                out.push(Action::Click { x, y, button });
            }
            RawAction::Move { x, y } => out.push(Action::Move { x: coord(index, "x", x)?, y: coord(index, "y", y)? }),
            RawAction::Down { x, y, button } => out.push(Action::Down { at: point(index, x, y)?, button }),
            RawAction::Up { x, y, button } => out.push(Action::Up { at: point(index, x, y)?, button }),
            RawAction::Drag { x, y, to_x, to_y, button } => out.push(Action::Drag {
                x: coord(index, "x", x)?,
                y: coord(index, "y", y)?,
                to_x: coord(index, "to_x", to_x)?,
                to_y: coord(index, "to_y", to_y)?,
                button,
            }),
            RawAction::Type { text } => out.push(Action::Type { text }),
            RawAction::Key { key, modifiers } => {
                if key.is_empty() {
                    return Err(ActionError::Bad { index, why: "key must name a key".into() });
                }
                out.push(Action::Key { key, modifiers })
            }
            RawAction::Scroll { x, y, direction, amount } => {
                if !(1..=20).contains(&amount) {
                    return Err(ActionError::Bad { index, why: format!("scroll amount must be 1 to 20, got {amount}") });
                }
                out.push(Action::Scroll { at: point(index, x, y)?, direction, amount })
            }
            RawAction::Wait { ms } => {
                if ms > MAX_WAIT_MS {
                    return Err(ActionError::Bad { index, why: format!("wait must be 0 to 5000 ms, got {ms}") });
                }
                out.push(Action::Wait { ms })
            }
        }
    }
    Ok(out)
}

/// How long the screen must stay still after a batch, clamped to 0–5000 ms.
pub fn settle_ms(requested: Option<u64>) -> u64 {
    requested.unwrap_or(DEFAULT_SETTLE_MS).min(MAX_WAIT_MS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn coordinates_are_placed_on_the_screen_in_the_models_space() {
        let batch = |v: serde_json::Value| parse_batch(&v).unwrap();
        let mut b = batch(json!([{"type": "click", "x": 500, "y": 500}, {"type": "drag", "x": 0, "y": 0, "to_x": 1000, "to_y": 1000}]));
        place(&mut b, CoordSpace::Thousandths, SCREEN).unwrap();
        assert_eq!(b[0], Action::Click { x: 640, y: 400, button: Button::Left });
        assert_eq!(b[1], Action::Drag { x: 0, y: 0, to_x: 1279, to_y: 799, button: Button::Left });
        let mut b = batch(json!([{"type": "click", "x": 1001, "y": 5}]));
        assert!(place(&mut b, CoordSpace::Thousandths, SCREEN).unwrap_err().to_string().contains("x 1001 is not from 0 to 1000"));
        let mut b = batch(json!([{"type": "move", "x": 1279, "y": 799}]));
        place(&mut b, CoordSpace::Pixels, SCREEN).unwrap();
        assert_eq!(b[0], Action::Move { x: 1279, y: 799 });
        let mut b = batch(json!([{"type": "scroll", "x": 10, "y": 800, "direction": "down"}]));
        assert_eq!(place(&mut b, CoordSpace::Pixels, SCREEN).unwrap_err().to_string(), "y 800 is outside the screen (y is 0 to 799 on this 1280x800 screen). Nothing was done");
        assert_eq!(CoordSpace::Thousandths.from_pixel((640, 400), SCREEN), (500, 500));
        assert_eq!(CoordSpace::default_for("Qwen2.5-VL-7B-Instruct"), CoordSpace::Thousandths);
        assert_eq!(CoordSpace::default_for("ui-tars-1.5-7b"), CoordSpace::Thousandths);
        assert_eq!(CoordSpace::default_for("claude-sonnet-4-5"), CoordSpace::Pixels);
    }

    #[test]
    fn parses_the_design_example_and_rounds() {
        let b = parse_batch(&json!([{"type":"key","key":"l","modifiers":["ctrl"]},{"type":"click","x":10.6,"y":3}])).unwrap();
        assert_eq!(b[1], Action::Click { x: 11, y: 3, button: Button::Left });
    }

    #[test]
    fn refuses_oversized_batches_counting_double_clicks_twice() {
        let many: Vec<_> = (0..25).map(|_| json!({"type":"move","x":1,"y":1})).collect();
        assert_eq!(parse_batch(&json!(many)), Err(ActionError::TooMany(25)));
        let doubles: Vec<_> = (0..13).map(|_| json!({"type":"double_click","x":1,"y":1})).collect();
        assert_eq!(parse_batch(&json!(doubles)), Err(ActionError::TooMany(26)));
    }

    #[test]
    fn refuses_bad_values() {
        assert!(parse_batch(&json!([{"type":"click","x":-1,"y":0}])).is_err());
        assert!(parse_batch(&json!([{"type":"click","x":100001,"y":0}])).is_err());
        assert!(parse_batch(&json!([{"type":"scroll","direction":"up","amount":21}])).is_err());
        assert!(parse_batch(&json!([{"type":"wait","ms":5001}])).is_err());
        assert!(parse_batch(&json!([{"type":"teleport"}])).is_err());
        assert_eq!(settle_ms(None), 300);
        assert_eq!(settle_ms(Some(9000)), 5000);
    }
}
