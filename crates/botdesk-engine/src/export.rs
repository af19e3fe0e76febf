//! `botdesk replay --out FILE.html|.mp4|.webm`: a run as a report or a video, made on this machine
//! from what the data directory keeps (no computer, no Docker).
//!
//! - `.html`: one self-contained page: the run, then every step with its screenshot (the frame the
//!   model received) and where its actions landed drawn over it; the person's turns on the screen
//!   marked. No script, nothing fetched.
//! - `.mp4` (H.264) / `.webm` (VP9): the run's screen recording on the run's own timeline (the
//!   first frame held from the run's start, the last to its end), each action drawn in where and
//!   when it happened, the person's turns captioned. Without a recording, the model's frames are
//!   shown each from its step to the next. Encoded by `ffmpeg` (a program of this machine).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;

use crate::replay::{Acted, Mark};
use crate::runs::{NoteEvent, Trajectory, TrajectoryStep};
use crate::{Engine, EngineError, ErrorCode, Result};

/// A mark stays drawn this long after its action.
const MARK_SECONDS: f64 = 1.5;
/// The longest an encoding may take before it is stopped.
const ENCODE_BOUND: Duration = Duration::from_secs(30 * 60);

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Exported {
    pub path: PathBuf,
    pub run: String,
    pub steps: usize,
    pub bytes: u64,
    /// The video came from the screen recording (else from the model's frames); None for a report.
    pub from_recording: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Html,
    Mp4,
    Webm,
}

impl Engine {
    /// Writes one of a bot's runs (`run`: its id; None: the latest) to `out`, as its extension
    /// says: `.html`, `.mp4` or `.webm`.
    pub async fn export_replay(&self, bot: &crate::BotRef, run: Option<&str>, out: &Path) -> Result<Exported> {
        let kind = match out.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
            Some("html") => Kind::Html,
            Some("mp4") => Kind::Mp4,
            Some("webm") => Kind::Webm,
            _ => return Err(EngineError::invalid(format!("{} must end in .json, .html, .mp4 or .webm", out.display()))),
        };
        let t = self.trajectory(bot, run).await?;
        let mut shots = std::collections::HashMap::new();
        for step in &t.steps {
            if let TrajectoryStep::Tool { screenshot: Some(rel), .. } = step {
                if let Ok(png) = self.chat_image(rel).await {
                    shots.insert(rel.clone(), png);
                }
            }
        }
        let write_err = |e: std::io::Error| EngineError::invalid(format!("cannot write {}: {e}", out.display()));
        let from_recording = match kind {
            Kind::Html => {
                tokio::fs::write(out, html(&t, &shots)).await.map_err(write_err)?;
                None
            }
            Kind::Mp4 | Kind::Webm => {
                let work = self.data_dir().cache().join(format!("export-{}", uuid::Uuid::new_v4().simple()));
                std::fs::create_dir_all(&work).map_err(write_err)?;
                let recording = self.recording(&t.run.id);
                let made = video(&t, recording.as_ref(), &shots, &work, out, kind == Kind::Webm).await;
                let _ = std::fs::remove_dir_all(&work);
                made?;
                Some(recording.is_some())
            }
        };
        let bytes = tokio::fs::metadata(out).await.map_err(write_err)?.len();
        Ok(Exported { path: out.to_path_buf(), run: t.run.id.clone(), steps: t.steps.len(), bytes, from_recording })
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// "+m:ss" from the run's start.
fn offset(t: &Trajectory, at: i64) -> String {
    let s = (at - t.run.started_at).max(0) / 1000;
    format!("+{}:{:02}", s / 60, s % 60)
}

/// A caption for a mark that is not a point (typed text, keys).
fn caption(m: &Mark) -> Option<String> {
    match m {
        Mark::Type { text } => Some(format!("typed: {}", text.chars().take(80).collect::<String>())),
        Mark::Key { keys, held: false } => Some(format!("keys: {keys}")),
        Mark::Key { keys, held: true } => Some(format!("holds: {keys}")),
        Mark::Scroll { direction, amount, .. } => Some(format!("scroll {direction} {amount}")),
        _ => None,
    }
}

/// The SVG drawn over a screenshot, in screen pixels.
fn svg_marks(acted: &Acted) -> String {
    let (w, h) = botdesk_core::action::SCREEN;
    let mut s = format!(r#"<svg class="marks" viewBox="0 0 {w} {h}" preserveAspectRatio="none" xmlns="http://www.w3.org/2000/svg">"#);
    let mut captions = vec![];
    for m in &acted.marks {
        match m {
            Mark::Click { x, y, button } => {
                let _ = write!(s, r#"<circle class="click" data-x="{x}" data-y="{y}" cx="{x}" cy="{y}" r="18"/><circle class="dot" cx="{x}" cy="{y}" r="3"/>"#);
                if button != "left" {
                    captions.push(format!("{button} click"));
                }
            }
            Mark::Move { x, y } => {
                let _ = write!(s, r#"<circle class="move" cx="{x}" cy="{y}" r="6"/>"#);
            }
            Mark::Drag { x, y, to_x, to_y } => {
                let _ = write!(s, r#"<line class="drag" x1="{x}" y1="{y}" x2="{to_x}" y2="{to_y}"/><circle class="click" cx="{to_x}" cy="{to_y}" r="12"/>"#);
            }
            Mark::Scroll { x: Some(x), y: Some(y), .. } => {
                let _ = write!(s, r#"<circle class="move" cx="{x}" cy="{y}" r="10"/>"#);
            }
            _ => {}
        }
        captions.extend(caption(m));
    }
    for (i, c) in captions.iter().enumerate() {
        let y = h as usize - 20 - 34 * (captions.len() - 1 - i);
        let _ = write!(s, r#"<text class="caption" x="16" y="{y}">{}</text>"#, esc(c));
    }
    s.push_str("</svg>");
    s
}

const STYLE: &str = "body{font:15px system-ui,sans-serif;margin:0 auto;max-width:1100px;padding:16px;color:#1d2330;background:#f6f7f9}\
header{border-bottom:1px solid #d5d9e0;margin-bottom:12px}h1{font-size:20px;margin:0 0 4px}.meta{color:#5b6473}\
ol{list-style:none;padding:0}li.step{background:#fff;border:1px solid #d5d9e0;border-radius:6px;margin:8px 0;padding:8px 12px}\
li.takeover,li.handback{border-left:5px solid #d9822b;background:#fff7ee}li.network{border-left:5px solid #c92a2a;background:#fff5f5}li.approval{border-left:5px solid #1971c2;background:#f1f7ff}.t{color:#5b6473;font-variant-numeric:tabular-nums;margin-right:8px}\
code{background:#eef0f4;padding:1px 4px;border-radius:3px;white-space:pre-wrap;word-break:break-all}.result{color:#3b4350;margin:4px 0;white-space:pre-wrap}\
figure{position:relative;margin:6px 0;max-width:960px}figure img{display:block;width:100%}figure svg{position:absolute;inset:0;width:100%;height:100%}\
.click{fill:none;stroke:#e5243b;stroke-width:4}.dot{fill:#e5243b}.move{fill:none;stroke:#2b6de5;stroke-width:3}.drag{stroke:#e5243b;stroke-width:4}\
.caption{font:bold 24px sans-serif;fill:#fff;paint-order:stroke;stroke:#000;stroke-width:5px}.error{color:#b3261e}";

/// The self-contained report.
fn html(t: &Trajectory, shots: &std::collections::HashMap<String, Vec<u8>>) -> String {
    let r = &t.run;
    let mut s = String::new();
    let _ = write!(
        s,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{} — run {}</title><style>{STYLE}</style></head><body>",
        esc(&t.bot.name),
        esc(&r.id)
    );
    let cost = r.cost_usd.map(|c| format!(" · ${c:.4}")).unwrap_or_default();
    let secs = r.duration_ms / 1000;
    let _ = write!(
        s,
        "<header><h1>{}: {}</h1><p class=\"meta\">Run <code>{}</code> · <span id=\"status\">{}</span> · {} min {:02} s · {} tokens{cost}{}</p></header><ol id=\"steps\">",
        esc(&t.bot.name),
        esc(&r.task.chars().take(200).collect::<String>()),
        esc(&r.id),
        r.status,
        secs / 60,
        secs % 60,
        r.usage.prompt() + r.usage.output,
        r.error.as_deref().map(|e| format!(" · <span class=\"error\">{}</span>", esc(e))).unwrap_or_default(),
    );
    let mut n = 0;
    for step in &t.steps {
        match step {
            TrajectoryStep::Task { at, text } => {
                let _ = write!(s, "<li class=\"step task\"><span class=\"t\">{}</span><b>Task</b> {}</li>", offset(t, *at), esc(text));
            }
            TrajectoryStep::Message { at, text } => {
                let _ = write!(s, "<li class=\"step message\"><span class=\"t\">{}</span>{}</li>", offset(t, *at), esc(text));
            }
            TrajectoryStep::Note { at, text, event } => {
                let class = match event {
                    Some(NoteEvent::Takeover) => "takeover",
                    Some(NoteEvent::Handback) => "handback",
                    Some(NoteEvent::Network) => "network",
                    Some(NoteEvent::Approval) => "approval",
                    None => "note",
                };
                let _ = write!(s, "<li class=\"step {class}\"><span class=\"t\">{}</span><i>{}</i></li>", offset(t, *at), esc(text));
            }
            TrajectoryStep::Tool { at, tool, arguments, status, result, screenshot, acted, .. } => {
                let when = acted.as_ref().map_or(*at, |a| a.at);
                n += 1;
                let args = match arguments {
                    serde_json::Value::String(raw) => raw.clone(),
                    v => v.to_string(),
                };
                let _ = write!(
                    s,
                    "<li class=\"step tool\" data-tool=\"{}\" data-status=\"{status}\"><span class=\"t\">{}</span><span class=\"n\">{n}.</span> <b>{}</b> <code>{}</code>",
                    esc(tool),
                    offset(t, when),
                    esc(tool),
                    esc(&args.chars().take(600).collect::<String>())
                );
                if let Some(r) = result {
                    let _ = write!(s, "<div class=\"result\">{}</div>", esc(&r.chars().take(1000).collect::<String>()));
                }
                if let Some(png) = screenshot.as_ref().and_then(|rel| shots.get(rel)) {
                    let data = base64::engine::general_purpose::STANDARD.encode(png);
                    let _ = write!(s, "<figure><img alt=\"the screen the model saw\" src=\"data:image/png;base64,{data}\">");
                    if let Some(a) = acted {
                        s.push_str(&svg_marks(a));
                    }
                    s.push_str("</figure>");
                }
                s.push_str("</li>");
            }
        }
    }
    s.push_str("</ol></body></html>\n");
    s
}

/// Seconds on the export's timeline (from the run's start).
fn secs(t: &Trajectory, at: i64) -> f64 {
    (at - t.run.started_at).max(0) as f64 / 1000.0
}

/// The ffmpeg filter chain that draws the marks and captions the person's turns, applied to a
/// video on the run's timeline; its text goes in files under `work` (nothing to escape).
fn overlay_filters(t: &Trajectory, work: &Path, end: f64) -> std::io::Result<Vec<String>> {
    let (w, h) = botdesk_core::action::SCREEN;
    let mut f = vec![];
    let mut n = 0;
    let mut text = |f: &mut Vec<String>, body: &str, x: String, y: String, from: f64, to: f64| -> std::io::Result<()> {
        n += 1;
        let file = work.join(format!("caption-{n}.txt"));
        std::fs::write(&file, body)?;
        f.push(format!(
            "drawtext=textfile='{}':expansion=none:fontsize=24:fontcolor=white:borderw=3:bordercolor=black:x={x}:y={y}:enable='between(t,{from:.3},{to:.3})'",
            file.display()
        ));
        Ok(())
    };
    let boxed = |f: &mut Vec<String>, x: u32, y: u32, r: u32, color: &str, from: f64, to: f64| {
        let (bx, by) = (x.saturating_sub(r).min(w - 2 * r), y.saturating_sub(r).min(h - 2 * r));
        f.push(format!("drawbox=x={bx}:y={by}:w={}:h={}:color={color}:t=4:enable='between(t,{from:.3},{to:.3})'", 2 * r, 2 * r));
    };
    let mut turn_from = None;
    // A step's captions give way to the next step's.
    let acted_at: Vec<f64> =
        t.steps.iter().filter_map(|s| if let TrajectoryStep::Tool { acted: Some(a), .. } = s { Some(secs(t, a.at)) } else { None }).collect();
    let mut k = 0;
    for step in &t.steps {
        match step {
            TrajectoryStep::Tool { acted: Some(a), .. } => {
                let from = secs(t, a.at);
                let to = from + MARK_SECONDS;
                k += 1;
                let caption_to = acted_at.get(k).map_or(to, |next| to.min(*next));
                let mut line = 0;
                for m in &a.marks {
                    match m {
                        Mark::Click { x, y, .. } => boxed(&mut f, *x, *y, 18, "red@0.9", from, to),
                        Mark::Move { x, y } => boxed(&mut f, *x, *y, 6, "0x2b6de5@0.9", from, to),
                        Mark::Drag { x, y, to_x, to_y } => {
                            boxed(&mut f, *x, *y, 12, "red@0.9", from, to);
                            boxed(&mut f, *to_x, *to_y, 18, "red@0.9", from, to);
                        }
                        Mark::Scroll { x: Some(x), y: Some(y), .. } => boxed(&mut f, *x, *y, 10, "0x2b6de5@0.9", from, to),
                        _ => {}
                    }
                    if let Some(c) = caption(m) {
                        line += 1;
                        text(&mut f, &c, "20".into(), format!("h-{}", 20 + 40 * line), from, caption_to)?;
                    }
                }
            }
            TrajectoryStep::Note { at, event: Some(NoteEvent::Takeover), .. } => turn_from = Some(secs(t, *at)),
            TrajectoryStep::Note { at, event: Some(NoteEvent::Handback), .. } => {
                if let Some(from) = turn_from.take() {
                    text(&mut f, "The person has the screen", "w-tw-20".into(), "20".into(), from, secs(t, *at))?;
                }
            }
            _ => {}
        }
    }
    if let Some(from) = turn_from {
        text(&mut f, "The person has the screen", "w-tw-20".into(), "20".into(), from, end)?;
    }
    Ok(f)
}

/// Makes the video: the recording (or the model's frames) on the run's timeline, marks drawn in.
async fn video(
    t: &Trajectory,
    recording: Option<&(crate::RecordingMeta, PathBuf)>,
    shots: &std::collections::HashMap<String, Vec<u8>>,
    work: &Path,
    out: &Path,
    webm: bool,
) -> Result<()> {
    let io = |e: std::io::Error| EngineError::new(ErrorCode::Internal, format!("preparing the video in {}: {e}", work.display()));
    let end = (t.run.duration_ms as f64 / 1000.0).max(1.0);
    let mut args: Vec<String> = vec!["-nostdin".into(), "-y".into(), "-loglevel".into(), "error".into()];
    let (mut chain, fps) = match recording {
        Some((meta, video)) => {
            // The recording began after the run did and ended with it: its first frame is held
            // from the run's start, its last to the run's end.
            let lead = secs(t, meta.started_at);
            let tail = (end - lead - meta.duration_ms() as f64 / 1000.0).max(0.0);
            args.extend(["-i".into(), video.display().to_string()]);
            (vec![format!("tpad=start_duration={lead:.3}:start_mode=clone:stop_duration={tail:.3}:stop_mode=clone"), format!("fps={}", meta.fps)], meta.fps)
        }
        None => {
            // The model's frames, each from its step to the next.
            let frames: Vec<(f64, &Vec<u8>)> = t
                .steps
                .iter()
                .filter_map(|s| match s {
                    TrajectoryStep::Tool { at, screenshot: Some(rel), .. } => shots.get(rel).map(|png| (secs(t, *at), png)),
                    _ => None,
                })
                .collect();
            if frames.is_empty() {
                return Err(EngineError::new(ErrorCode::NotFound, format!("run {} has no screen recording and no screenshot to make a video from", t.run.id)));
            }
            let mut list = String::from("ffconcat version 1.0\n");
            for (i, (from, png)) in frames.iter().enumerate() {
                let file = work.join(format!("frame-{i}.png"));
                std::fs::write(&file, png).map_err(io)?;
                let until = frames.get(i + 1).map_or(end, |n| n.0);
                let shown = if i == 0 { until } else { until - from };
                let _ = writeln!(list, "file '{}'\nduration {:.3}", file.display(), shown.max(0.05));
            }
            let last = work.join(format!("frame-{}.png", frames.len() - 1));
            let _ = writeln!(list, "file '{}'", last.display());
            let list_file = work.join("frames.txt");
            std::fs::write(&list_file, list).map_err(io)?;
            args.extend(["-f".into(), "concat".into(), "-safe".into(), "0".into(), "-i".into(), list_file.display().to_string()]);
            let (w, h) = botdesk_core::action::SCREEN;
            (vec![format!("scale={w}:{h}"), "fps=4".into()], 4)
        }
    };
    chain.extend(overlay_filters(t, work, end).map_err(io)?);
    chain.push("format=yuv420p".into());
    let script = work.join("filters.txt");
    std::fs::write(&script, chain.join(",\n")).map_err(io)?;
    args.extend(["-filter_script:v".into(), script.display().to_string(), "-t".into(), format!("{end:.3}"), "-an".into()]);
    let gop = (fps * 10).to_string();
    if webm {
        args.extend(["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-row-mt", "1", "-b:v", "0", "-crf", "40", "-g", &gop].map(String::from));
    } else {
        args.extend(["-c:v", "libx264", "-preset", "veryfast", "-crf", "28", "-g", &gop, "-movflags", "+faststart"].map(String::from));
    }
    args.push(out.display().to_string());
    ffmpeg(&args, ENCODE_BOUND, &format!("making {}", out.display())).await?;
    Ok(())
}

/// Runs this machine's ffmpeg with `args` (stdin closed) within `bound` and returns what it
/// printed on stdout; `doing` says what for, in its errors (ffmpeg missing: how to install it).
pub(crate) async fn ffmpeg(args: &[String], bound: Duration, doing: &str) -> Result<Vec<u8>> {
    let child = tokio::process::Command::new("ffmpeg").args(args).stdin(std::process::Stdio::null()).kill_on_drop(true).output();
    let done = tokio::time::timeout(bound, child)
        .await
        .map_err(|_| EngineError::new(ErrorCode::Internal, format!("{doing} took ffmpeg over {} s; stopped", bound.as_secs())))?;
    let output = done.map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            EngineError::new(ErrorCode::Invalid, format!("{doing} needs ffmpeg on this machine (Debian/Ubuntu: sudo apt install ffmpeg)"))
        }
        _ => EngineError::new(ErrorCode::Internal, format!("{doing}: running ffmpeg: {e}")),
    })?;
    if !output.status.success() {
        let said = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = said.lines().rev().take(5).collect();
        return Err(EngineError::new(ErrorCode::Internal, format!("{doing}: ffmpeg failed: {}", tail.into_iter().rev().collect::<Vec<_>>().join(" / "))));
    }
    Ok(output.stdout)
}
