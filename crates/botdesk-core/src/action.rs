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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, ts_rs::TS)]
pub enum CoordSpace {
    /// Pixels of the screenshot it was sent (the screen's own size).
    #[default]
    #[serde(rename = "pixels")]
    Pixels,
    /// 0 to 1000 on each axis, whatever the screen's size (Qwen2-VL, Qwen3-VL, UI-TARS before 1.5).
    #[serde(rename = "0-1000")]
    Thousandths,
    /// Pixels of the screenshot as the model's own image processor resized it: Qwen2.5-VL and
    /// UI-TARS-1.5 (Qwen's `smart_resize`: each side rounded to a multiple of 28, the area kept
    /// within 3,136 to 12,845,056 pixels; a 1280x800 screen is 1288x812 to the model).
    #[serde(rename = "smart-resize")]
    SmartResize,
}

/// Qwen's `smart_resize` (qwen-vl-utils `vision_process.py`, which UI-TARS-1.5 documents in its
/// README_coordinates.md): the size a `w`×`h` image is given to the model at.
pub fn smart_resize((w, h): (u32, u32)) -> (u32, u32) {
    const FACTOR: f64 = 28.0;
    const MIN_PIXELS: f64 = 4.0 * 28.0 * 28.0;
    const MAX_PIXELS: f64 = 16384.0 * 28.0 * 28.0;
    // Python's round(): halves go to the even neighbour.
    let round = f64::round_ties_even;
    let (wf, hf) = (w as f64, h as f64);
    let (mut wb, mut hb) = ((round(wf / FACTOR) * FACTOR).max(FACTOR), (round(hf / FACTOR) * FACTOR).max(FACTOR));
    if wb * hb > MAX_PIXELS {
        let beta = (wf * hf / MAX_PIXELS).sqrt();
        (wb, hb) = ((wf / beta / FACTOR).floor() * FACTOR, (hf / beta / FACTOR).floor() * FACTOR);
    } else if wb * hb < MIN_PIXELS {
        let beta = (MIN_PIXELS / (wf * hf)).sqrt();
        (wb, hb) = ((wf * beta / FACTOR).ceil() * FACTOR, (hf * beta / FACTOR).ceil() * FACTOR);
    }
    (wb as u32, hb as u32)
}

impl CoordSpace {
    pub const ALL: [CoordSpace; 3] = [CoordSpace::Pixels, CoordSpace::Thousandths, CoordSpace::SmartResize];

    pub fn as_str(self) -> &'static str {
        match self {
            CoordSpace::Pixels => "pixels",
            CoordSpace::Thousandths => "0-1000",
            CoordSpace::SmartResize => "smart-resize",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// What a model of this name was trained on (the table of models).
    pub fn default_for(model: &str) -> Self {
        crate::models::lookup(model).info.coordinates
    }

    /// The span of the model's coordinates on a `screen`: (0, 0) is the top left corner and
    /// this the bottom right.
    pub fn extent(self, screen: (u32, u32)) -> (u32, u32) {
        match self {
            CoordSpace::Pixels => screen,
            CoordSpace::Thousandths => (1000, 1000),
            CoordSpace::SmartResize => smart_resize(screen),
        }
    }

    /// How the model is told to give coordinates (in a tool's description).
    pub fn describe(self) -> String {
        match self {
            CoordSpace::Pixels => "Coordinates are pixels of the screenshot (x from the left, y from the top).".into(),
            CoordSpace::Thousandths => {
                "Coordinates are from 0 to 1000 on each axis, whatever the screen's size: (0, 0) is the top left corner, (1000, 1000) the bottom right.".into()
            }
            CoordSpace::SmartResize => {
                let (w, h) = self.extent(SCREEN);
                format!("Coordinates are pixels of the screenshot as you see it ({w}x{h}): x from the left, y from the top.")
            }
        }
    }

    /// A coordinate `v` given in this space, on an axis of the screen `size` pixels long that
    /// spans `extent` in the model's coordinates (see [`CoordSpace::extent`]); None: beyond it.
    /// Pixels are not checked against the screen here.
    pub fn to_pixel(self, v: u32, size: u32, extent: u32) -> Option<u32> {
        match self {
            CoordSpace::Pixels => Some(v),
            _ if v <= extent && extent > 0 => Some(((v as u64 * size as u64 + extent as u64 / 2) / extent as u64) as u32),
            _ => None,
        }
    }

    /// A screen pixel in this space (what the model is told, e.g. where the cursor is).
    pub fn from_pixel(self, (x, y): (u32, u32), (w, h): (u32, u32)) -> (u32, u32) {
        let (ew, eh) = self.extent((w, h));
        ((x * ew + w / 2) / w.max(1), (y * eh + h / 2) / h.max(1))
    }
}

/// A rectangle of the screen to look at closely (Claude's `zoom`), in screen pixels: columns
/// `x0..x1` and rows `y0..y1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Region {
    pub x0: u32,
    pub y0: u32,
    pub x1: u32,
    pub y1: u32,
}

impl Region {
    /// The region a model gave as `[left, top, right, bottom]` in `space`, in pixels of a
    /// `w`×`h` screen; refused when it is empty, upside down or outside the screen.
    pub fn place([x0, y0, x1, y1]: [u32; 4], space: CoordSpace, (w, h): (u32, u32)) -> Result<Region, ActionError> {
        let (ew, eh) = space.extent((w, h));
        let px = |name: &str, v: u32, size: u32, extent: u32| -> Result<u32, ActionError> {
            let p = space
                .to_pixel(v, size, extent)
                .ok_or_else(|| ActionError::Outside(format!("the region's {name} {v} is not from 0 to {extent} ({})", space.describe())))?;
            // A region's right and bottom edges may be the screen's own.
            if p > size {
                return Err(ActionError::Outside(format!("the region's {name} {v} is outside the screen (0 to {size} on this {w}x{h} screen)")));
            }
            Ok(p)
        };
        let r = Region { x0: px("left", x0, w, ew)?, y0: px("top", y0, h, eh)?, x1: px("right", x1, w, ew)?, y1: px("bottom", y1, h, eh)? };
        if r.x1 <= r.x0 || r.y1 <= r.y0 {
            return Err(ActionError::Outside(format!(
                "the region [{x0}, {y0}, {x1}, {y1}] is empty: it is [left, top, right, bottom] with left < right and top < bottom"
            )));
        }
        Ok(r)
    }

    pub fn width(&self) -> u32 {
        self.x1 - self.x0
    }

    pub fn height(&self) -> u32 {
        self.y1 - self.y0
    }
}

/// How much a zoom enlarges a region at most: the image it gives costs tokens in proportion to
/// the region (four times its area at most), and its small print is twice as large.
pub const ZOOM_SCALE: u32 = 2;

/// Cuts `r` out of a `w`×`h` RGB image and enlarges it (whole pixels repeated, so nothing is
/// blurred) by [`ZOOM_SCALE`], or less when that would not fit in `fit`: what a model sees of a
/// region when it zooms.
pub fn zoom_rgb(w: u32, h: u32, rgb: &[u8], r: Region, fit: (u32, u32)) -> Option<(u32, u32, Vec<u8>)> {
    if rgb.len() != w as usize * h as usize * 3 || r.x1 > w || r.y1 > h || r.x1 <= r.x0 || r.y1 <= r.y0 {
        return None;
    }
    let scale = (fit.0 / r.width()).min(fit.1 / r.height()).clamp(1, ZOOM_SCALE);
    let (zw, zh) = (r.width() * scale, r.height() * scale);
    let mut out = Vec::with_capacity(zw as usize * zh as usize * 3);
    for y in 0..zh {
        let row = (r.y0 + y / scale) as usize * w as usize;
        for x in 0..zw {
            let at = (row + (r.x0 + x / scale) as usize) * 3;
            out.extend_from_slice(&rgb[at..at + 3]);
        }
    }
    Some((zw, zh, out))
}

/// Places a checked batch on a `w`×`h` screen: coordinates given in `space` become pixels, and a
/// coordinate outside the screen refuses the whole batch.
pub fn place(batch: &mut [Action], space: CoordSpace, (w, h): (u32, u32)) -> Result<(), ActionError> {
    let (ew, eh) = space.extent((w, h));
    // The model's index of an action (a double click became two clicks) is not kept: say which value.
    let one = |name: &str, v: &mut u32, (size, extent): (u32, u32)| -> Result<(), ActionError> {
        // A point is on the screen: the far end of a scaled axis is its last pixel, not one past it.
        let px = match space.to_pixel(*v, size, extent) {
            Some(p) if space != CoordSpace::Pixels => p.min(size.saturating_sub(1)),
            Some(p) => p,
            None => return Err(ActionError::Outside(format!("{name} {v} is not from 0 to {extent} ({})", space.describe()))),
        };
        if px >= size {
            return Err(ActionError::Outside(format!("{name} {v} is outside the screen ({name} is 0 to {} on this {w}x{h} screen)", size - 1)));
        }
        *v = px;
        Ok(())
    };
    let (xs, ys) = ((w, ew), (h, eh));
    for a in batch.iter_mut() {
        match a {
            Action::Click { x, y, .. } | Action::Move { x, y } => {
                one("x", x, xs)?;
                one("y", y, ys)?;
            }
            Action::Drag { x, y, to_x, to_y, .. } => {
                one("x", x, xs)?;
                one("y", y, ys)?;
                one("to_x", to_x, xs)?;
                one("to_y", to_y, ys)?;
            }
            Action::Down { at: Some((x, y)), .. } | Action::Up { at: Some((x, y)), .. } | Action::Scroll { at: Some((x, y)), .. } => {
                one("x", x, xs)?;
                one("y", y, ys)?;
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
    Click {
        x: f64,
        y: f64,
        #[serde(default)]
        button: Button,
        /// Keys held during the click, e.g. `["shift"]` (a shift-click extends a selection).
        #[serde(default)]
        modifiers: Vec<String>,
    },
    DoubleClick {
        x: f64,
        y: f64,
        #[serde(default)]
        button: Button,
        #[serde(default)]
        modifiers: Vec<String>,
    },
    Move {
        x: f64,
        y: f64,
    },
    Down {
        #[serde(default)]
        x: Option<f64>,
        #[serde(default)]
        y: Option<f64>,
        #[serde(default)]
        button: Button,
    },
    Up {
        #[serde(default)]
        x: Option<f64>,
        #[serde(default)]
        y: Option<f64>,
        #[serde(default)]
        button: Button,
    },
    Drag {
        x: f64,
        y: f64,
        to_x: f64,
        to_y: f64,
        #[serde(default)]
        button: Button,
    },
    Type {
        text: String,
    },
    Key {
        key: String,
        #[serde(default)]
        modifiers: Vec<String>,
    },
    Scroll {
        #[serde(default)]
        x: Option<f64>,
        #[serde(default)]
        y: Option<f64>,
        direction: Direction,
        #[serde(default = "one")]
        amount: u32,
        /// Keys held while scrolling, e.g. `["ctrl"]` (zooms in most programs).
        #[serde(default)]
        modifiers: Vec<String>,
    },
    Wait {
        ms: u64,
    },
}

fn one() -> u32 {
    1
}

/// A checked action: integer pixel coordinates, bounded amounts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Action {
    Click {
        x: u32,
        y: u32,
        button: Button,
    },
    Move {
        x: u32,
        y: u32,
    },
    Down {
        at: Option<(u32, u32)>,
        button: Button,
    },
    Up {
        at: Option<(u32, u32)>,
        button: Button,
    },
    Drag {
        x: u32,
        y: u32,
        to_x: u32,
        to_y: u32,
        button: Button,
    },
    Type {
        text: String,
    },
    Key {
        key: String,
        modifiers: Vec<String>,
    },
    Scroll {
        at: Option<(u32, u32)>,
        direction: Direction,
        amount: u32,
    },
    Wait {
        ms: u64,
    },
    /// A key pressed and held (released by a [`Action::KeyUp`] of the same batch or a later one).
    KeyDown {
        key: String,
    },
    KeyUp {
        key: String,
    },
}

/// The longest name of a key (xdotool's keysym names are short; this keeps nonsense out).
const MAX_KEY_NAME: usize = 64;

fn held(index: usize, modifiers: &[String]) -> Result<(), ActionError> {
    match modifiers.iter().find(|m| m.is_empty() || m.len() > MAX_KEY_NAME || m.contains(char::is_whitespace)) {
        Some(m) => Err(ActionError::Bad { index, why: format!("a modifier is one key name, e.g. \"shift\", not {m:?}") }),
        None if modifiers.len() > 4 => Err(ActionError::Bad { index, why: "at most 4 keys are held at once".into() }),
        None => Ok(()),
    }
}

/// `actions` with the `modifiers` held through them: each pressed before, released after (in
/// reverse order).
pub fn holding(modifiers: &[String], actions: Vec<Action>) -> Vec<Action> {
    let mut out: Vec<Action> = modifiers.iter().map(|k| Action::KeyDown { key: k.clone() }).collect();
    out.extend(actions);
    out.extend(modifiers.iter().rev().map(|k| Action::KeyUp { key: k.clone() }));
    out
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
    let items = json.as_array().ok_or_else(|| ActionError::Bad { index: 0, why: "expected a JSON array of actions".into() })?;
    let mut raws = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let raw: RawAction = serde_json::from_value(item.clone()).map_err(|e| ActionError::Bad { index, why: e.to_string() })?;
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
            RawAction::Click { x, y, button, modifiers } => {
                held(index, &modifiers)?;
                out.extend(holding(&modifiers, vec![Action::Click { x: coord(index, "x", x)?, y: coord(index, "y", y)?, button }]));
            }
            RawAction::DoubleClick { x, y, button, modifiers } => {
                held(index, &modifiers)?;
                let (x, y) = (coord(index, "x", x)?, coord(index, "y", y)?);
                out.extend(holding(&modifiers, vec![Action::Click { x, y, button }, Action::Click { x, y, button }]));
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
            RawAction::Scroll { x, y, direction, amount, modifiers } => {
                if !(1..=20).contains(&amount) {
                    return Err(ActionError::Bad { index, why: format!("scroll amount must be 1 to 20, got {amount}") });
                }
                held(index, &modifiers)?;
                out.extend(holding(&modifiers, vec![Action::Scroll { at: point(index, x, y)?, direction, amount }]))
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
    #[test]
    fn a_region_is_placed_in_the_models_space_and_checked() {
        assert_eq!(Region::place([100, 50, 300, 150], CoordSpace::Pixels, SCREEN).unwrap(), Region { x0: 100, y0: 50, x1: 300, y1: 150 });
        assert_eq!(Region::place([0, 0, 1000, 1000], CoordSpace::Thousandths, SCREEN).unwrap(), Region { x0: 0, y0: 0, x1: 1280, y1: 800 });
        assert_eq!(Region::place([0, 0, 1280, 800], CoordSpace::Pixels, SCREEN).unwrap().width(), 1280);
        for (bad, why) in [
            ([10, 10, 10, 20], "is empty"),
            ([30, 10, 20, 20], "is empty"),
            ([0, 0, 1281, 10], "right 1281 is outside"),
            ([0, 0, 10, 900], "bottom 900 is outside"),
        ] {
            let e = Region::place(bad, CoordSpace::Pixels, SCREEN).unwrap_err().to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        assert!(Region::place([0, 0, 1001, 10], CoordSpace::Thousandths, SCREEN).unwrap_err().to_string().contains("not from 0 to 1000"));
    }

    #[test]
    fn a_zoom_repeats_whole_pixels_as_far_as_it_fits() {
        // A 4x2 image whose pixel (x, y) is [x, y, 7].
        let rgb: Vec<u8> = (0..2u8).flat_map(|y| (0..4u8).flat_map(move |x| [x, y, 7])).collect();
        let (w, h, z) = zoom_rgb(4, 2, &rgb, Region { x0: 1, y0: 0, x1: 3, y1: 2 }, (8, 5)).unwrap();
        assert_eq!((w, h), (4, 4), "2x2 enlarged twice fits 8x5");
        assert_eq!(zoom_rgb(4, 2, &rgb, Region { x0: 0, y0: 0, x1: 1, y1: 1 }, (100, 100)).unwrap().0, ZOOM_SCALE, "never more than twice");
        let px = |x: usize, y: usize| &z[(y * w as usize + x) * 3..][..3];
        assert_eq!((px(0, 0), px(1, 1), px(2, 0), px(3, 3)), (&[1, 0, 7][..], &[1, 0, 7][..], &[2, 0, 7][..], &[2, 1, 7][..]));
        assert_eq!(zoom_rgb(4, 2, &rgb, Region { x0: 0, y0: 0, x1: 4, y1: 2 }, (3, 3)).unwrap().0, 4, "never made smaller");
        assert!(zoom_rgb(4, 2, &rgb, Region { x0: 0, y0: 0, x1: 5, y1: 2 }, (8, 8)).is_none(), "outside the image");
        assert!(zoom_rgb(4, 2, &rgb[1..], Region { x0: 0, y0: 0, x1: 1, y1: 1 }, (8, 8)).is_none(), "the wrong number of bytes");
    }

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
        assert_eq!(
            place(&mut b, CoordSpace::Pixels, SCREEN).unwrap_err().to_string(),
            "y 800 is outside the screen (y is 0 to 799 on this 1280x800 screen). Nothing was done"
        );
        assert_eq!(CoordSpace::Thousandths.from_pixel((640, 400), SCREEN), (500, 500));
        assert_eq!(CoordSpace::default_for("Qwen2.5-VL-7B-Instruct"), CoordSpace::SmartResize);
        assert_eq!(CoordSpace::default_for("ByteDance-Seed/UI-TARS-1.5-7B"), CoordSpace::SmartResize);
        assert_eq!(CoordSpace::default_for("ui-tars-72b-dpo"), CoordSpace::Thousandths);
        assert_eq!(CoordSpace::default_for("qwen3-vl:8b"), CoordSpace::Thousandths);
        assert_eq!(CoordSpace::default_for("claude-sonnet-4-5"), CoordSpace::Pixels);
        // UI-TARS-1.5 on a 1280x800 screen: it sees 1288x812 and answers in those pixels.
        assert_eq!(smart_resize(SCREEN), (1288, 812));
        assert_eq!(CoordSpace::SmartResize.extent(SCREEN), (1288, 812));
        let mut b = batch(json!([{"type": "click", "x": 644, "y": 406}, {"type": "move", "x": 1288, "y": 812}]));
        place(&mut b, CoordSpace::SmartResize, SCREEN).unwrap();
        assert_eq!((b[0].clone(), b[1].clone()), (Action::Click { x: 640, y: 400, button: Button::Left }, Action::Move { x: 1279, y: 799 }));
        assert_eq!(CoordSpace::SmartResize.from_pixel((640, 400), SCREEN), (644, 406));
        // Python's round() sends halves to the even side (a JS port that did not misclicked).
        assert_eq!(smart_resize((1022, 1522)), (1008, 1512));
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
