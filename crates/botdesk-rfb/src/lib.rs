//! `botdesk-rfb`: the native VNC viewer's engine. One task per screen session owns the connection
//! (events and input from one `select!` loop), keeps an RGBA framebuffer with dirty rectangles and
//! reconnects with backoff; `ws` delivers frames to the webview over a loopback WebSocket.
//! Knows neither Tauri nor the engine: the owner says where to connect through a `Resolve`.

pub mod framebuffer;
pub mod session;
pub mod ws;

pub use framebuffer::{Framebuffer, Rect};
pub use session::{ConnState, Input, Resolve, Session, Target, Update};
pub use ws::{FrameServer, Registry};

/// The X keysym of a character: Latin-1 maps to itself, everything else to 0x0100_0000 + code point.
pub fn keysym_for_char(c: char) -> u32 {
    let cp = c as u32;
    match cp {
        0x20..=0x7e | 0xa0..=0xff => cp,
        _ => 0x0100_0000 + cp,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn keysyms_of_characters() {
        assert_eq!(super::keysym_for_char('a'), 0x61);
        assert_eq!(super::keysym_for_char('é'), 0xe9);
        assert_eq!(super::keysym_for_char('世'), 0x0100_4e16);
        assert_eq!(super::keysym_for_char('€'), 0x0100_20ac);
    }
}
