//! The app's screen sessions: one `botdesk-rfb` session per open bot screen, served to the
//! webview by the loopback WebSocket frame server. A session asks the engine where to connect
//! each time it (re)connects: the control transport while the person holds control, the view
//! transport otherwise.

use std::{sync::Arc, time::Duration};

use botdesk_engine::{BotRef, Engine};
use botdesk_rfb::{FrameServer, Registry, Resolve, Session, Target};

pub struct Screens {
    engine: Engine,
    registry: Registry,
    server: FrameServer,
}

fn resolver(engine: Engine, bot: BotRef) -> Resolve {
    Arc::new(move || {
        let (engine, bot) = (engine.clone(), bot.clone());
        Box::pin(async move {
            let t = engine.screen_target(&bot).await.map_err(|e| e.message)?;
            Ok(Target { port: t.port, token: t.token, control: t.control, compressed: t.compressed })
        })
    })
}

impl Screens {
    pub async fn start(engine: Engine) -> std::io::Result<Screens> {
        let registry: Registry = Default::default();
        let secret = botdesk_engine::new_token();
        let server = FrameServer::start(registry.clone(), secret).await?;
        Ok(Screens { engine, registry, server })
    }

    /// The viewer URL of the bot's screen; the session starts now if it is not running.
    pub fn open(&self, bot: &BotRef) -> String {
        let bot_id = bot.id.as_str();
        let mut reg = self.registry.lock().unwrap();
        if !reg.contains_key(bot_id) {
            reg.insert(bot_id.to_string(), Arc::new(Session::spawn(resolver(self.engine.clone(), bot.clone()))));
        }
        self.server.url(bot_id)
    }

    /// Ends the bot's session (its task stops when the last viewer lets go).
    pub fn close(&self, bot_id: &str) {
        self.registry.lock().unwrap().remove(bot_id);
    }

    /// Control was taken, released or expired: reconnect to the right transport now.
    pub fn retarget(&self, bot_id: &str) {
        if let Some(s) = self.registry.lock().unwrap().get(bot_id) {
            s.retarget();
        }
    }

    /// Control of the bot changed elsewhere (the CLI, an expiry): reconnect only if the session
    /// is connected the other way (a session that is connecting asks the engine anyway).
    pub fn follow_control(&self, bot_id: &str, control: bool) {
        if let Some(s) = self.registry.lock().unwrap().get(bot_id) {
            if matches!(s.state(), botdesk_rfb::ConnState::Connected { control: c } if c != control) {
                s.retarget();
            }
        }
    }

    /// Bots whose screen received the person's input within `within`.
    pub fn recently_used(&self, within: Duration) -> Vec<String> {
        let reg = self.registry.lock().unwrap();
        reg.iter().filter(|(_, s)| s.shared.last_input.lock().unwrap().is_some_and(|t| t.elapsed() < within)).map(|(k, _)| k.clone()).collect()
    }
}
