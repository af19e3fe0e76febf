//! `botdesk model calibrate`: which coordinate space a model really points in. Numbered targets
//! are shown on a bot's desktop (a page in its browser), the model is asked to click a few, and
//! where it pointed is read in each space Botdesk knows; the one whose points land nearest the
//! targets fits. Works for any model and dialect; a person with a new local model finds out in a
//! minute whether its clicks land.

use botdesk_agent::conversation::{Block, Message, Role, ToolCall, ToolResult};
use botdesk_agent::tools::ToolKind;
use botdesk_agent::{Image, Request, ToolChoice};
use botdesk_core::action::{CoordSpace, SCREEN};
use botdesk_core::{BrowserCommand, ImageFormat};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::{Engine, EngineError, ErrorCode, Result};

/// A target: its colour, and its centre on the page.
pub type Target = ((u8, u8, u8), (u32, u32));

/// The targets: a colour each (drawn solid, found again in the screenshot by it) at a place on
/// the page, spread over the screen so the spaces tell apart.
pub const TARGETS: [Target; 4] = [((220, 30, 30), (150, 140)), ((20, 150, 60), (1110, 170)), ((30, 70, 220), (640, 420)), ((190, 30, 190), (1050, 600))];
/// A target's diameter on the page, in pixels.
const SIZE: u32 = 40;
/// A space fits when its points land this close to the targets' centres on average (half a
/// target).
pub const FITS_WITHIN: f64 = SIZE as f64 / 2.0;

/// Where the model pointed for one target.
#[derive(Debug, Clone, Serialize)]
pub struct Try {
    pub target: usize,
    /// The target's centre on the screen.
    pub at: (u32, u32),
    /// What the model gave, in its own coordinates (None: it pointed nowhere).
    pub pointed: Option<(f64, f64)>,
    /// Its words, when it pointed nowhere.
    pub said: Option<String>,
}

/// How far each space puts the model's points from the targets.
#[derive(Debug, Clone, Serialize)]
pub struct Fit {
    pub space: CoordSpace,
    /// The mean distance in screen pixels (over the targets it pointed at).
    pub mean_error: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Calibration {
    pub model: String,
    pub tries: Vec<Try>,
    /// Best first.
    pub fits: Vec<Fit>,
    /// The space that fits, if one does.
    pub best: Option<CoordSpace>,
    /// What the model is set to now.
    pub current: CoordSpace,
}

/// The page with the targets, as a data URL (nothing is written to the bot's folder).
fn page() -> String {
    let mut html = String::from("<!doctype html><title>Botdesk calibration</title><body style='margin:0;background:#fff;font:bold 20px sans-serif'>");
    for (i, ((r, g, b), (x, y))) in TARGETS.iter().enumerate() {
        html.push_str(&format!(
            "<div style='position:fixed;left:{}px;top:{}px;width:{SIZE}px;height:{SIZE}px;background:rgb({r},{g},{b})'></div><div style='position:fixed;left:{}px;top:{}px;color:#333'>{}</div>",
            x - SIZE / 2,
            y - SIZE / 2,
            x + SIZE / 2 + 6,
            y - 12,
            i + 1
        ));
    }
    html.push_str("</body>");
    let mut url = String::from("data:text/html,");
    for b in html.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            url.push(b as char);
        } else {
            url.push_str(&format!("%{b:02X}"));
        }
    }
    url
}

/// The centre of each target on the screenshot (`w`×`h` RGB), by its colour.
pub fn find_targets(w: u32, h: u32, rgb: &[u8]) -> Vec<Option<(u32, u32)>> {
    TARGETS
        .iter()
        .map(|((r, g, b), _)| {
            let (mut x0, mut y0, mut x1, mut y1, mut n) = (u32::MAX, u32::MAX, 0, 0, 0u32);
            for y in 0..h {
                for x in 0..w {
                    let at = ((y * w + x) * 3) as usize;
                    if rgb[at..at + 3] == [*r, *g, *b] {
                        (x0, y0, x1, y1) = (x0.min(x), y0.min(y), x1.max(x), y1.max(y));
                        n += 1;
                    }
                }
            }
            (n >= SIZE * SIZE / 2).then(|| ((x0 + x1) / 2, (y0 + y1) / 2))
        })
        .collect()
}

/// Each space's mean error over the tries, best first.
pub fn fits(tries: &[Try]) -> Vec<Fit> {
    let mut out: Vec<Fit> = CoordSpace::ALL
        .iter()
        .map(|&space| {
            let (w, h) = SCREEN;
            let (ew, eh) = space.extent(SCREEN);
            let errors: Vec<f64> = tries
                .iter()
                .filter_map(|t| {
                    let (x, y) = t.pointed?;
                    let px = |v: f64, size: u32, extent: u32| match space {
                        CoordSpace::Pixels => v,
                        _ => v * size as f64 / extent as f64,
                    };
                    let (sx, sy) = (px(x, w, ew), px(y, h, eh));
                    Some(((sx - t.at.0 as f64).powi(2) + (sy - t.at.1 as f64).powi(2)).sqrt())
                })
                .collect();
            let mean_error = if errors.is_empty() { f64::INFINITY } else { errors.iter().sum::<f64>() / errors.len() as f64 };
            Fit { space, mean_error }
        })
        .collect();
    out.sort_by(|a, b| a.mean_error.total_cmp(&b.mean_error));
    out
}

impl Engine {
    /// Shows the targets on `bot`'s desktop and asks `model` to click each; see the module.
    pub async fn calibrate(&self, model: &str, bot: &crate::BotRef) -> Result<Calibration> {
        let (client, m, _) = self.model_client(model).await?;
        self.browser(&bot.id, BrowserCommand::Navigate { url: page() }).await?;
        // The page drawn (a moment for the browser to paint).
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let shot = self.screenshot(bot, ImageFormat::Png).await?;
        let png = shot.image.ok_or_else(|| EngineError::new(ErrorCode::Internal, "the screenshot came without an image"))?;
        let (w, h, rgb) = botdesk_core::screenshot::decode_png(&png, SCREEN).map_err(EngineError::from)?;
        let centres = find_targets(w, h, &rgb);
        if centres.iter().any(Option::is_none) {
            return Err(EngineError::new(
                ErrorCode::Internal,
                "the targets are not on the bot's screen (is another window in front of its browser?); close it and try again",
            ));
        }
        // (A Claude or OpenAI computer dialect points in screenshot pixels by construction.)
        let specs = botdesk_agent::tools::specs(CoordSpace::Pixels);
        let system = "You are a bot working a Linux desktop through screenshots. You see the screen and click on it with your tools.";
        let mut tries = vec![];
        for (i, centre) in centres.into_iter().enumerate() {
            let at = centre.expect("checked above");
            // The screenshot as the answer to a look the model "made", then the question.
            let look = ToolCall::new(format!("look_{i}"), ToolKind::ComputerObserve.name().into(), "{}".into());
            let mut result = ToolResult::ok(&look.id, "Screen 1280x800.");
            result.image = Some(Image::png(png.clone()));
            let messages = vec![
                Message::user(format!("Click the centre of the coloured square numbered {}. Do nothing else.", i + 1)),
                Message { role: Role::Assistant, blocks: vec![Block::ToolCall(look)] },
                Message { role: Role::User, blocks: vec![Block::ToolResult(result)] },
            ];
            let req = Request { system, messages: &messages, tools: &specs, tool_choice: ToolChoice::Auto };
            let turn = client.complete(&req, &mut Quiet, &CancellationToken::new()).await.map_err(|e| EngineError::new(ErrorCode::Internal, e.to_string()))?;
            let pointed = botdesk_agent::tools::pointed_at(&turn.text, &turn.calls);
            let said = pointed.is_none().then(|| turn.text.chars().take(300).collect());
            tries.push(Try { target: i + 1, at, pointed, said });
        }
        let fits = fits(&tries);
        let best = fits.first().filter(|f| f.mean_error <= FITS_WITHIN).map(|f| f.space);
        Ok(Calibration { model: m.id, tries, fits, best, current: m.coordinates })
    }
}

struct Quiet;
impl botdesk_agent::Listener for Quiet {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_space_whose_points_land_wins() {
        let at = [(150, 140), (1110, 170), (640, 420)];
        let tries = |f: &dyn Fn(u32, u32) -> (f64, f64)| -> Vec<Try> {
            at.iter().enumerate().map(|(i, &(x, y))| Try { target: i + 1, at: (x, y), pointed: Some(f(x, y)), said: None }).collect()
        };
        let best = |t: &[Try]| fits(t)[0].clone();
        let pixels = best(&tries(&|x, y| (x as f64 + 1.0, y as f64)));
        assert_eq!(pixels.space, CoordSpace::Pixels);
        assert!(pixels.mean_error <= 1.0);
        assert_eq!(best(&tries(&|x, y| (x as f64 * 1000.0 / 1280.0, y as f64 * 1000.0 / 800.0))).space, CoordSpace::Thousandths);
        assert_eq!(best(&tries(&|x, y| (x as f64 * 1288.0 / 1280.0, y as f64 * 812.0 / 800.0))).space, CoordSpace::SmartResize);
        // Pointing nowhere: nothing fits.
        let none: Vec<Try> = at.iter().enumerate().map(|(i, &a)| Try { target: i + 1, at: a, pointed: None, said: Some("no".into()) }).collect();
        assert!(fits(&none).iter().all(|f| f.mean_error.is_infinite()));
    }

    #[test]
    fn targets_are_found_by_their_colour() {
        let (w, h) = (200, 100);
        let mut rgb = vec![255u8; (w * h * 3) as usize];
        let ((r, g, b), _) = TARGETS[2];
        for y in 30..70 {
            for x in 100..140 {
                let at = ((y * w + x) * 3) as usize;
                rgb[at..at + 3].copy_from_slice(&[r, g, b]);
            }
        }
        let found = find_targets(w, h, &rgb);
        assert_eq!(found[2], Some((119, 49)));
        assert!(found[0].is_none());
    }
}
