//! The frame transport to the webview: a WebSocket server on 127.0.0.1 (the fastest path measured:
//! ~115 full frames/s against ~45 for a Tauri channel). A viewer opens
//! `ws://127.0.0.1:PORT/screen/KEY?s=SECRET[&w=W&h=H]`; the secret is random per app start, so no
//! other page or local program can watch or drive a screen. `w`×`h` is the viewer's size on screen
//! in device pixels (as the `v` message below), so the first frame already comes at it.
//!
//! Server → viewer, binary (little-endian):
//!   1 = rects:  [1][n: u16] then n × ([x][y][w][h]: u16 each, then w·h·4 bytes RGBA); a large
//!               update comes as several of these, each at most `MAX_MESSAGE` (1.5 MiB) of pixels
//!   2 = size:   [2][w][h][screen w][screen h]: u16 each; w×h is what frames are sent at (the
//!               screen scaled down to the viewer's viewport, never up)
//! (The pointer is drawn into the frames by the screen's server.)
//! Server → viewer, text: `{"type":"state", "state": …}` (see `ConnState`) or
//! `{"type":"clipboard"}` (the bot's clipboard changed; the app reads its text from the engine).
//! Viewer → server, text: `{"t":"p","x":..,"y":..,"b":mask}`, `{"t":"k","s":keysym,"d":down}`,
//! `{"t":"r"}` (full refresh), `{"t":"v","w":..,"h":..}` (its
//! size on screen in device pixels; pointer coordinates stay in screen pixels). Anything else is ignored with a
//! log line; it never closes the session.
//! `wire.json` holds golden examples of all of it; this module's test and the viewer's own
//! (`ui/tests/wire.test.ts`, through `tests/ui_wire.rs`) replay them.

use std::{collections::HashMap, sync::Arc};

use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use tokio::{net::TcpListener, sync::broadcast};
use tokio_tungstenite::tungstenite::{
    handshake::server::{ErrorResponse, Request, Response},
    http::StatusCode,
    Message,
};

use crate::{
    framebuffer::Rect,
    session::{Input, Session, Update},
};

/// Screen sessions by key (the app uses the bot id).
pub type Registry = Arc<std::sync::Mutex<HashMap<String, Arc<Session>>>>;

pub struct FrameServer {
    pub port: u16,
    secret: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FrameServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Deserialize)]
#[serde(tag = "t")]
enum ViewerMsg {
    #[serde(rename = "p")]
    Pointer { x: f64, y: f64, b: u8 },
    #[serde(rename = "k")]
    Key { s: u32, d: bool },
    #[serde(rename = "r")]
    Refresh,
    /// The canvas's size on screen, in device pixels: frames come scaled to fit it.
    #[serde(rename = "v")]
    Viewport { w: u32, h: u32 },
}

impl FrameServer {
    /// Listens on 127.0.0.1 (an ephemeral port) and serves the sessions of `registry`.
    pub async fn start(registry: Registry, secret: String) -> std::io::Result<FrameServer> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        let s = secret.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve(stream, registry.clone(), s.clone()));
            }
        });
        Ok(FrameServer { port, secret, task })
    }

    pub fn url(&self, key: &str) -> String {
        format!("ws://127.0.0.1:{}/screen/{key}?s={}", self.port, self.secret)
    }
}

// The handshake callback's error type is tungstenite's own response.
#[allow(clippy::result_large_err)]
async fn serve(stream: tokio::net::TcpStream, registry: Registry, secret: String) {
    let (mut key, mut viewport) = (None, None);
    let check = |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        let uri = req.uri();
        let k = uri.path().strip_prefix("/screen/").map(str::to_string);
        let param = |name: &str| uri.query().into_iter().flat_map(|q| q.split('&')).find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=').map(str::to_string));
        let ok = param("s").is_some_and(|s| s == secret);
        match k {
            Some(k) if ok && registry.lock().unwrap().contains_key(&k) => {
                key = Some(k);
                let size = |name: &str| param(name).and_then(|v| v.parse::<u32>().ok());
                viewport = size("w").zip(size("h")).map(|(w, h)| (w.clamp(1, 16384), h.clamp(1, 16384)));
                Ok(resp)
            }
            _ => {
                let mut r = ErrorResponse::new(Some("unknown screen or wrong secret".into()));
                *r.status_mut() = StatusCode::FORBIDDEN;
                Err(r)
            }
        }
    };
    let Ok(ws) = tokio_tungstenite::accept_hdr_async(stream, check).await else { return };
    let Some(session) = key.and_then(|k| registry.lock().unwrap().get(&k).cloned()) else { return };
    let (mut tx, mut rx) = ws.split();
    let mut updates = session.subscribe();

    // Frames go at the viewer's on-screen size, from its URL and then its `v` messages (scale to
    // fit happens here, in Rust, so the webview handles a fraction of the bytes); full size until
    // the viewer says.
    // First the whole picture: state, size, every pixel.
    let mut first = vec![state_msg(&Update::State(session.state()))];
    first.extend(full_frame(&session, viewport));
    for m in first.into_iter().flatten() {
        if tx.send(m).await.is_err() {
            return;
        }
    }
    loop {
        tokio::select! {
            u = updates.recv() => {
                let msgs = match u {
                    Ok(Update::Rects(rects)) => rects_msgs(&session, &rects, viewport),
                    Ok(Update::Resized(..)) => full_frame(&session, viewport),
                    Ok(u @ (Update::State(_) | Update::ClipboardChanged)) => vec![state_msg(&u)],
                    // This viewer fell behind: skip to the current picture.
                    Err(broadcast::error::RecvError::Lagged(_)) => full_frame(&session, viewport),
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                for m in msgs.into_iter().flatten() {
                    if tx.send(m).await.is_err() {
                        return;
                    }
                }
            }
            m = rx.next() => match m {
                Some(Ok(Message::Text(t))) => match serde_json::from_str::<ViewerMsg>(&t) {
                    Ok(ViewerMsg::Viewport { w, h }) => {
                        let v = Some((w.clamp(1, 16384), h.clamp(1, 16384)));
                        if v != viewport {
                            viewport = v;
                            for m in full_frame(&session, viewport).into_iter().flatten() {
                                if tx.send(m).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                    Ok(msg) => {
                        session.send(to_input(msg));
                    }
                    Err(e) => tracing::warn!("screen viewer sent a bad message ({e}); ignored"),
                },
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            }
        }
    }
}

fn to_input(m: ViewerMsg) -> Input {
    let coord = |v: f64| v.round().clamp(0.0, u16::MAX as f64) as u16;
    match m {
        ViewerMsg::Pointer { x, y, b } => Input::Pointer { x: coord(x), y: coord(y), buttons: b },
        ViewerMsg::Key { s, d } => Input::Key { keysym: s, down: d },
        ViewerMsg::Refresh => Input::FullRefresh,
        ViewerMsg::Viewport { .. } => unreachable!("handled by the connection"),
    }
}

fn state_msg(u: &Update) -> Option<Message> {
    let v = match u {
        Update::State(s) => {
            let mut v = serde_json::to_value(s).ok()?;
            v["type"] = "state".into();
            v
        }
        Update::ClipboardChanged => serde_json::json!({"type": "clipboard"}),
        _ => return None,
    };
    Some(Message::Text(v.to_string().into()))
}

/// The size frames are sent at: the screen scaled down (never up) to fit the viewport.
pub fn out_size(fb: (u16, u16), viewport: Option<(u32, u32)>) -> (u16, u16) {
    let (w, h) = fb;
    match viewport {
        Some((vw, vh)) if w > 0 && h > 0 && (vw < w as u32 || vh < h as u32) => {
            let s = (vw as f64 / w as f64).min(vh as f64 / h as f64);
            let fit = (((w as f64 * s).round() as u16).max(1), ((h as f64 * s).round() as u16).max(1));
            // The viewer sends its canvas's own aspect fit: within rounding, take it exactly, so
            // the webview draws frames 1:1 (a pixel off and it would resample every frame).
            if (fit.0 as u32).abs_diff(vw) <= 1 && (fit.1 as u32).abs_diff(vh) <= 1 {
                (vw as u16, vh as u16)
            } else {
                fit
            }
        }
        _ => (w, h),
    }
}

/// Size message: [2][out w][out h][screen w][screen h], then every pixel.
fn full_frame(session: &Session, viewport: Option<(u32, u32)>) -> Vec<Option<Message>> {
    let (w, h) = {
        let fb = session.shared.fb.lock().unwrap();
        (fb.width, fb.height)
    };
    let (ow, oh) = out_size((w, h), viewport);
    let mut size = vec![2u8];
    for v in [ow, oh, w, h] {
        size.extend_from_slice(&v.to_le_bytes());
    }
    let mut msgs = vec![Some(Message::Binary(size.into()))];
    msgs.extend(rects_msgs(session, &[Rect { x: 0, y: 0, w, h }], viewport));
    msgs
}

/// At most this many pixel bytes per message: a frame at a tab's size goes as one message (each
/// message costs the webview a round of IPC, an event and a draw call), while a full-size update
/// goes as a few bands, so neither side holds a whole 4 MB screen per message.
pub const MAX_MESSAGE: usize = 1536 * 1024;

/// Messages with the current pixels of `rects` (clipped to the current size), scaled to the
/// viewport: each changed rectangle becomes the rectangle of output pixels it touches, each
/// output pixel the average of the screen pixels under it.
pub fn rects_msgs(session: &Session, rects: &[Rect], viewport: Option<(u32, u32)>) -> Vec<Option<Message>> {
    let fb = session.shared.fb.lock().unwrap();
    let (ow, oh) = out_size((fb.width, fb.height), viewport);
    let scaled = (ow, oh) != (fb.width, fb.height);
    let (fw, fh) = (fb.width as u32, fb.height as u32);
    let to_out = |r: Rect| -> Rect {
        if !scaled {
            return r;
        }
        let x0 = r.x as u32 * ow as u32 / fw;
        let y0 = r.y as u32 * oh as u32 / fh;
        let x1 = ((r.x as u32 + r.w as u32) * ow as u32).div_ceil(fw).min(ow as u32);
        let y1 = ((r.y as u32 + r.h as u32) * oh as u32).div_ceil(fh).min(oh as u32);
        Rect { x: x0 as u16, y: y0 as u16, w: (x1 - x0).max(1) as u16, h: (y1 - y0).max(1) as u16 }
    };
    // Cut every rectangle into bands of whole rows that fit a message.
    let mut bands = vec![];
    for r in rects.iter().filter_map(|r| r.clip(fb.width, fb.height)).map(to_out).filter_map(|r| r.clip(ow, oh)) {
        let rows = (MAX_MESSAGE / (r.w as usize * 4)).clamp(1, r.h as usize) as u16;
        let mut y = r.y;
        while y < r.y + r.h {
            let h = rows.min(r.y + r.h - y);
            bands.push(Rect { x: r.x, y, w: r.w, h });
            y += h;
        }
    }
    let mut out = vec![];
    let mut msg: Vec<u8> = vec![];
    let mut n = 0u16;
    let stride = fb.width as usize * 4;
    let mut finish = |msg: &mut Vec<u8>, n: &mut u16| {
        if *n > 0 {
            msg[1..3].copy_from_slice(&n.to_le_bytes());
            out.push(Some(Message::Binary(std::mem::take(msg).into())));
            *n = 0;
        }
    };
    for r in bands {
        let bytes = r.area() as usize * 4;
        if n > 0 && msg.len() + 8 + bytes > MAX_MESSAGE + 3 {
            finish(&mut msg, &mut n);
        }
        if n == 0 {
            msg = Vec::with_capacity(3 + 8 + bytes.max(MAX_MESSAGE.min(bytes * 2)));
            msg.extend_from_slice(&[1, 0, 0]);
        }
        for v in [r.x, r.y, r.w, r.h] {
            msg.extend_from_slice(&v.to_le_bytes());
        }
        if scaled {
            scale_into(&mut msg, &fb, r, (ow, oh));
        } else {
            for row in 0..r.h as usize {
                let at = (r.y as usize + row) * stride + r.x as usize * 4;
                rgba_into(&mut msg, &fb.pixels[at..at + r.w as usize * 4]);
            }
        }
        n += 1;
    }
    finish(&mut msg, &mut n);
    out
}

/// Appends BGRX pixels as RGBA with an opaque alpha.
fn rgba_into(out: &mut Vec<u8>, bgrx: &[u8]) {
    let at = out.len();
    out.resize(at + bgrx.len(), 0);
    for (d, s) in out[at..].chunks_exact_mut(4).zip(bgrx.chunks_exact(4)) {
        let px = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
        d.copy_from_slice(&((px & 0x0000_ff00) | (px >> 16 & 0xff) | (px & 0xff) << 16 | 0xff00_0000).to_le_bytes());
    }
}

/// Appends the output pixels of `r` (in output coordinates), RGBA: box averages of the screen.
fn scale_into(out: &mut Vec<u8>, fb: &crate::Framebuffer, r: Rect, (ow, oh): (u16, u16)) {
    // A separable box filter: each output row first sums its source rows over the columns it
    // needs, then each output pixel averages its columns of those sums. The division by the box
    // size is a multiplication by its exact reciprocal, from a table (sums stay far below
    // 2^16·256, so the rounding never shows).
    let (fw, fh) = (fb.width as usize, fb.height as usize);
    let (ow, oh) = (ow as usize, oh as usize);
    let stride = fw * 4;
    let span = |o: usize, f: usize, n: usize| {
        let s0 = o * f / n;
        (s0, ((o + 1) * f / n).max(s0 + 1).min(f))
    };
    let cols: Vec<(usize, usize)> = (r.x as usize..(r.x + r.w) as usize).map(|ox| span(ox, fw, ow)).collect();
    let (Some(&(first, _)), Some(&(_, last))) = (cols.first(), cols.last()) else { return };
    let widest = cols.iter().map(|(a, b)| b - a).max().unwrap_or(1);
    let tallest = (r.y as usize..(r.y + r.h) as usize).map(|oy| span(oy, fh, oh)).map(|(a, b)| b - a).max().unwrap_or(1);
    let reciprocal: Vec<u64> = (0..=widest * tallest).map(|n| (1u64 << 32).div_ceil(n.max(1) as u64)).collect();
    // Four lanes per pixel (the unused byte summed too, and ignored) so the row sums vectorise.
    let mut sums = vec![0u32; (last - first) * 4];
    out.reserve(r.area() as usize * 4);
    for oy in r.y as usize..(r.y + r.h) as usize {
        let (sy0, sy1) = span(oy, fh, oh);
        let rows = &fb.pixels[sy0 * stride..sy1 * stride];
        for (s, p) in sums.iter_mut().zip(&rows[first * 4..last * 4]) {
            *s = *p as u32;
        }
        for row in rows.chunks_exact(stride).skip(1) {
            for (s, p) in sums.iter_mut().zip(&row[first * 4..last * 4]) {
                *s += *p as u32;
            }
        }
        let h = sy1 - sy0;
        for &(sx0, sx1) in &cols {
            let k = reciprocal[h * (sx1 - sx0)];
            let (mut b, mut g, mut rd) = (0u32, 0u32, 0u32);
            for px in sums[(sx0 - first) * 4..(sx1 - first) * 4].chunks_exact(4) {
                b += px[0];
                g += px[1];
                rd += px[2];
            }
            let avg = |v: u32| ((v as u64 * k) >> 32) as u8;
            out.extend_from_slice(&[avg(rd), avg(g), avg(b), 255]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{ConnState, Resolve, Session};
    use proptest::prelude::*;
    use std::sync::Arc;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

        /// Whatever a webview (or a page in it) sends the frame server: a message it understands,
        /// turned into input within the screen's coordinates, or one it ignores; never a panic.
        #[test]
        fn any_viewer_message_is_input_or_ignored(
            text in prop_oneof![
                "[ -~]{0,60}",
                (any::<f64>(), any::<f64>(), any::<u8>()).prop_map(|(x, y, b)| format!(r#"{{"t":"p","x":{x:e},"y":{y:e},"b":{b}}}"#)),
                (any::<i64>(), any::<i64>()).prop_map(|(w, h)| format!(r#"{{"t":"v","w":{w},"h":{h}}}"#)),
                (any::<u64>(), any::<bool>()).prop_map(|(s, d)| format!(r#"{{"t":"k","s":{s},"d":{d}}}"#)),
            ]
        ) {
            if let Ok(msg) = serde_json::from_str::<ViewerMsg>(&text) {
                if !matches!(msg, ViewerMsg::Viewport { .. }) {
                    let _ = to_input(msg);
                }
            }
        }
    }

    fn session_with(w: u16, h: u16) -> Session {
        let never: Resolve = Arc::new(|| Box::pin(std::future::pending()));
        let s = Session::spawn(never);
        *s.shared.fb.lock().unwrap() = crate::Framebuffer::new(w, h);
        s
    }

    fn rects_of(m: &Message) -> Vec<(u16, u16, u16, u16)> {
        let Message::Binary(b) = m else { panic!("binary") };
        let n = u16::from_le_bytes([b[1], b[2]]);
        let (mut at, mut out) = (3usize, vec![]);
        for _ in 0..n {
            let f = |i: usize| u16::from_le_bytes([b[at + i], b[at + i + 1]]);
            let r = (f(0), f(2), f(4), f(6));
            at += 8 + r.2 as usize * r.3 as usize * 4;
            out.push(r);
        }
        assert_eq!(at, b.len(), "the message is exactly its rectangles");
        out
    }

    #[tokio::test]
    async fn big_updates_go_in_bands_and_tiny_ones_in_one_message() {
        let s = session_with(1280, 800);
        let msgs: Vec<Message> = rects_msgs(&s, &[Rect { x: 0, y: 0, w: 1280, h: 800 }], None).into_iter().flatten().collect();
        assert!(msgs.len() > 1);
        let rows: u32 = msgs.iter().flat_map(rects_of).map(|r| r.3 as u32).sum();
        assert_eq!(rows, 800, "every row once");
        assert!(msgs.iter().all(|m| m.len() <= 3 + 8 + MAX_MESSAGE));
        // A 1×1 rectangle (a cursor-sized change) is one small message, not an endless loop.
        let msgs: Vec<Message> = rects_msgs(&s, &[Rect { x: 0, y: 0, w: 1, h: 1 }, Rect { x: 5, y: 5, w: 2, h: 3 }], None).into_iter().flatten().collect();
        assert_eq!(msgs.len(), 1);
        assert_eq!(rects_of(&msgs[0]), vec![(0, 0, 1, 1), (5, 5, 2, 3)]);
        // Nothing left after clipping: no message.
        assert!(rects_msgs(&s, &[Rect { x: 2000, y: 0, w: 5, h: 5 }], None).is_empty());
    }

    #[tokio::test]
    async fn frames_scale_down_to_the_viewport_with_box_averages() {
        assert_eq!(out_size((1280, 800), Some((640, 800))), (640, 400));
        assert_eq!(out_size((1280, 800), Some((4000, 4000))), (1280, 800), "never up");
        assert_eq!(out_size((1280, 800), Some((700, 437))), (700, 437), "the viewer's own fit, exactly (not 699×437)");
        assert_eq!(out_size((1280, 800), None), (1280, 800));
        let s = session_with(4, 2);
        {
            // Left half black, right half white; one bluish pixel (BGRX, as the screen sends it).
            let mut fb = s.shared.fb.lock().unwrap();
            let white = [255u8, 255, 255, 0].repeat(2);
            fb.put_bgrx(Rect { x: 2, y: 0, w: 2, h: 1 }, &white).unwrap();
            fb.put_bgrx(Rect { x: 2, y: 1, w: 2, h: 1 }, &white).unwrap();
            fb.put_bgrx(Rect { x: 0, y: 0, w: 1, h: 1 }, &[200, 100, 40, 0]).unwrap();
        }
        let msgs: Vec<Message> = rects_msgs(&s, &[Rect { x: 0, y: 0, w: 4, h: 2 }], Some((2, 1))).into_iter().flatten().collect();
        let Message::Binary(b) = &msgs[0] else { panic!() };
        assert_eq!(rects_of(&msgs[0]), vec![(0, 0, 2, 1)]);
        assert_eq!(&b[11..19], &[10, 25, 50, 255, 255, 255, 255, 255], "RGBA averages of 2×2 boxes");
        // Unscaled, each pixel is made RGBA as it is copied.
        let msgs: Vec<Message> = rects_msgs(&s, &[Rect { x: 0, y: 0, w: 1, h: 1 }], None).into_iter().flatten().collect();
        let Message::Binary(b) = &msgs[0] else { panic!() };
        assert_eq!(&b[11..15], &[40, 100, 200, 255]);
        // A one-pixel change maps to the output pixel it falls in.
        let msgs: Vec<Message> = rects_msgs(&s, &[Rect { x: 3, y: 1, w: 1, h: 1 }], Some((2, 1))).into_iter().flatten().collect();
        assert_eq!(rects_of(&msgs[0]), vec![(1, 0, 1, 1)]);
    }

    /// The golden fixtures of the wire format (`wire.json`), which the viewer's own test
    /// (`ui/tests/wire.test.ts`) replays too: what the server sends for a screen, its state
    /// messages, and how it reads the viewer's input.
    #[tokio::test]
    async fn replays_the_golden_wire_fixtures() {
        let fx: serde_json::Value = serde_json::from_str(include_str!("../wire.json")).unwrap();
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let unhex = |s: &str| (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect::<Vec<u8>>();
        let num = |v: &serde_json::Value| v.as_u64().unwrap();
        let screen = &fx["screen"];
        let (w, h) = (num(&screen["w"]) as u16, num(&screen["h"]) as u16);
        let s = session_with(w, h);
        s.shared.fb.lock().unwrap().put_bgrx(Rect { x: 0, y: 0, w, h }, &unhex(screen["bgrx"].as_str().unwrap())).unwrap();
        for case in fx["to_viewer"].as_array().unwrap() {
            let viewport = case["viewport"].as_array().map(|v| (num(&v[0]) as u32, num(&v[1]) as u32));
            let msgs = match case["rects"].as_array() {
                None => full_frame(&s, viewport),
                Some(rects) => {
                    let rects: Vec<Rect> =
                        rects.iter().map(|r| Rect { x: num(&r[0]) as u16, y: num(&r[1]) as u16, w: num(&r[2]) as u16, h: num(&r[3]) as u16 }).collect();
                    rects_msgs(&s, &rects, viewport)
                }
            };
            let sent: Vec<String> = msgs.into_iter().flatten().map(|m| hex(&m.into_data())).collect();
            let want: Vec<String> = case["messages"].as_array().unwrap().iter().map(|m| m.as_str().unwrap().to_string()).collect();
            assert_eq!(sent, want, "{}", case["what"]);
        }
        let updates = [
            Update::State(ConnState::Connecting),
            Update::State(ConnState::Connected { control: true }),
            Update::State(ConnState::Reconnecting { attempt: 2, retry_in_ms: 1000, error: "connection refused".into() }),
            Update::State(ConnState::Idle),
            Update::State(ConnState::Closed),
            Update::ClipboardChanged,
        ];
        let texts = fx["to_viewer_text"].as_array().unwrap();
        assert_eq!(texts.len(), updates.len());
        for (u, case) in updates.iter().zip(texts) {
            let Some(Message::Text(t)) = state_msg(u) else { panic!("{u:?} is a text message") };
            let sent: serde_json::Value = serde_json::from_str(&t).unwrap();
            let want: serde_json::Value = serde_json::from_str(case["text"].as_str().unwrap()).unwrap();
            assert_eq!(sent, want);
        }
        for case in fx["from_viewer"].as_array().unwrap() {
            let read = match serde_json::from_str::<ViewerMsg>(case["text"].as_str().unwrap()).unwrap() {
                ViewerMsg::Viewport { w, h } => serde_json::json!({"viewport": {"w": w, "h": h}}),
                m => match to_input(m) {
                    Input::Pointer { x, y, buttons } => serde_json::json!({"pointer": {"x": x, "y": y, "buttons": buttons}}),
                    Input::Key { keysym, down } => serde_json::json!({"key": {"keysym": keysym, "down": down}}),
                    Input::FullRefresh => serde_json::json!("refresh"),
                    other => panic!("{other:?} does not come from a viewer"),
                },
            };
            assert_eq!(read, case["input"], "{}", case["text"]);
        }
    }
}
