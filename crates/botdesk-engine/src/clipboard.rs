//! The person's clipboard and the bot's, as UTF-8 text. RFB's cut text is defined as Latin-1
//! (ISO 8859-1), so non-Latin text cannot pass through it: text goes to and comes from the bot's display by a small
//! Python X client run as the bot on its own display (python3-xlib is in the image); the screen
//! session's cut-text event only says that the bot's clipboard changed.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::{Engine, EngineError, ErrorCode, Result};
use botdesk_core::BotId;

/// The most clipboard text that goes either way (UTF-8 bytes): one X property.
pub const MAX_CLIPBOARD: usize = 64 * 1024;

/// Owns the display's CLIPBOARD and PRIMARY with its stdin (UTF-8 text: never an argument, which
/// every process can read for as long as this one keeps the selection) and serves
/// UTF8_STRING, TEXT, STRING (Latin-1, others as ?) and TARGETS until something else is copied
/// there; it forks away once it owns them, so the command returns at once.
const SET: &str = r#"
import os, sys
from Xlib import X, Xatom, display
from Xlib.protocol import event
data = sys.stdin.buffer.read()
d = display.Display()
w = d.screen().root.create_window(0, 0, 1, 1, 0, X.CopyFromParent)
UTF8, TARGETS, TEXT = d.intern_atom('UTF8_STRING'), d.intern_atom('TARGETS'), d.intern_atom('TEXT')
sels = [d.intern_atom('CLIPBOARD'), Xatom.PRIMARY]
for s in sels:
    w.set_selection_owner(s, X.CurrentTime)
d.sync()
if any(getattr(d.get_selection_owner(s), 'id', 0) != w.id for s in sels):
    sys.exit('another program kept the clipboard')
if os.fork():
    os._exit(0)
os.setsid()
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
owned = len(sels)
while owned:
    e = d.next_event()
    if e.type == X.SelectionClear:
        owned -= 1
    elif e.type == X.SelectionRequest:
        prop = e.property or e.target
        if e.target == TARGETS:
            e.requestor.change_property(prop, Xatom.ATOM, 32, [TARGETS, UTF8, TEXT, Xatom.STRING])
        elif e.target in (UTF8, TEXT):
            e.requestor.change_property(prop, UTF8, 8, data)
        elif e.target == Xatom.STRING:
            e.requestor.change_property(prop, Xatom.STRING, 8, data.decode('utf-8').encode('latin-1', 'replace'))
        else:
            prop = X.NONE
        e.requestor.send_event(event.SelectionNotify(time=e.time, requestor=e.requestor, selection=e.selection, target=e.target, property=prop))
        d.flush()
"#;

/// Prints the display's CLIPBOARD as UTF-8 (nothing when it is empty); fails when its owner does
/// not answer within 3 s or it holds more than ARGV[1] bytes.
const GET: &str = r#"
import select, sys, time
from Xlib import X, display
limit = int(sys.argv[1])
d = display.Display()
w = d.screen().root.create_window(0, 0, 1, 1, 0, X.CopyFromParent)
clip, utf8, prop, incr = d.intern_atom('CLIPBOARD'), d.intern_atom('UTF8_STRING'), d.intern_atom('BOTDESK_CLIPBOARD'), d.intern_atom('INCR')
if not getattr(d.get_selection_owner(clip), 'id', 0):
    sys.exit(0)
w.convert_selection(clip, utf8, prop, X.CurrentTime)
d.flush()
end = time.time() + 3
while time.time() < end:
    while d.pending_events():
        e = d.next_event()
        if e.type != X.SelectionNotify:
            continue
        if not e.property:
            sys.exit(0)
        r = w.get_full_property(prop, X.AnyPropertyType)
        if r is None:
            sys.exit(0)
        if r.property_type == incr or len(r.value) > limit:
            sys.exit('the clipboard holds more than %d bytes' % limit)
        v = r.value
        sys.stdout.buffer.write(v if isinstance(v, bytes) else v.encode())
        sys.exit(0)
    select.select([d], [], [], 0.1)
sys.exit('the program holding the clipboard did not answer within 3 s')
"#;

impl Engine {
    /// Puts the person's text on the bot's clipboard (CLIPBOARD and PRIMARY of its display), only
    /// while they control its screen.
    pub async fn set_clipboard(&self, bot: &crate::BotRef, text: &str) -> Result<()> {
        if text.len() > MAX_CLIPBOARD {
            return Err(EngineError::invalid(format!("the clipboard holds {} bytes; at most {} KiB of text reach the bot", text.len(), MAX_CLIPBOARD / 1024)));
        }
        if self.control_of(&bot.id).await?.is_none() {
            return Err(EngineError::new(ErrorCode::Stale, "take control of the screen to give the bot your clipboard"));
        }
        let text = bytes::Bytes::copy_from_slice(text.as_bytes());
        self.on_display(&bot.id, vec!["python3".into(), "-I".into(), "-c".into(), SET.into()], Some(text)).await.map(drop)
    }

    /// The text on the bot's clipboard (its display's CLIPBOARD), empty when there is none.
    pub async fn clipboard_text(&self, bot: &crate::BotRef) -> Result<String> {
        let out = self.on_display(&bot.id, vec!["python3".into(), "-I".into(), "-c".into(), GET.into(), MAX_CLIPBOARD.to_string()], None).await?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// Runs a command as the bot on its display (its desktop must be open) within 10 s, with
    /// `stdin`; its output, of which the host keeps at most [`MAX_CLIPBOARD`] bytes (more stops
    /// it).
    async fn on_display(&self, bot: &BotId, argv: Vec<String>, stdin: Option<bytes::Bytes>) -> Result<Vec<u8>> {
        let (b, computer) = self.bot_and_computer(bot).await?;
        if self.display_of(&computer.id, &b.id).await?.is_none() {
            return Err(EngineError::new(ErrorCode::NotRunning, format!("{}'s desktop is not open", b.name)));
        }
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let cancel = CancellationToken::new();
        let exec = self.exec_for(&b.id, None, argv, stdin, None, Some(Duration::from_secs(10)), Some(tx), cancel.clone());
        let drain = async {
            let (mut out, mut err, mut over) = (Vec::new(), Vec::new(), false);
            while let Some(o) = rx.recv().await {
                let into = if o.stream == botdesk_core::StreamKind::Stderr { &mut err } else { &mut out };
                if into.len() + o.data.len() > MAX_CLIPBOARD {
                    over = true;
                    cancel.cancel();
                    continue;
                }
                into.extend_from_slice(&o.data);
            }
            (out, err, over)
        };
        let (exit, (out, err, over)) = tokio::join!(exec, drain);
        let exit = exit?;
        if over {
            return Err(EngineError::invalid(format!("the bot's display answered with more than {} KiB", MAX_CLIPBOARD / 1024)));
        }
        if exit.code != 0 {
            let why = String::from_utf8_lossy(&err);
            let why: String = why.trim().lines().last().unwrap_or("no reason given").chars().take(200).collect();
            return Err(EngineError::new(ErrorCode::Internal, format!("the clipboard of {}'s display: {why}", b.name)));
        }
        Ok(out)
    }
}
