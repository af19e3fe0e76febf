//! Model providers and their keys. The provider's settings go to SQLite; its API key goes to the
//! OS keyring (Secret Service on Linux) under ("botdesk", "model:<id>") and nowhere else: not the
//! database, not logs, not activity, not the CLI's arguments or output.

use botdesk_core::{action::CoordSpace, Limits, ModelKind, Prices};
use serde::Serialize;

use crate::{keys::keyring_err, Engine, EngineError, ErrorCode, KeyStore, Result};

pub use botdesk_store::ModelRow as ModelView;

const SERVICE: &str = "botdesk";

/// One keyring operation on a model's key.
async fn with_entry<T: Send + 'static>(
    engine: &Engine,
    id: &str,
    f: impl FnOnce(keyring_core::Entry) -> keyring_core::Result<T> + Send + 'static,
) -> Result<T> {
    keyring_entry(engine, format!("model:{id}"), f).await
}

/// One keyring operation on the entry `user` of Botdesk's service, in the store this process
/// keeps keys in ([`crate::keys`]), off the async runtime (the keyring API blocks).
pub(crate) async fn keyring_entry<T: Send + 'static>(
    engine: &Engine,
    user: String,
    f: impl FnOnce(keyring_core::Entry) -> keyring_core::Result<T> + Send + 'static,
) -> Result<T> {
    let engine = engine.clone();
    crate::error::blocking(move || {
        let store = engine.inner.keys.store()?;
        let entry = keyring_core::Entry::new_in_store(&store, SERVICE, &user).map_err(|e| keyring_err("the OS keyring", e))?;
        f(entry).map_err(|e| match e {
            keyring_core::Error::PlatformFailure(e) | keyring_core::Error::NoStorageAccess(e) if store.vendor() == "botdesk key vault" => {
                EngineError::new(ErrorCode::Internal, e.to_string())
            }
            e => keyring_err("the OS keyring", e),
        })
    })
    .await
}

impl Engine {
    /// Which store holds this process's keys.
    pub async fn key_store(&self) -> KeyStore {
        let engine = self.clone();
        crate::error::blocking(move || Ok(engine.inner.keys.state())).await.unwrap_or(KeyStore::Memory)
    }

    /// Gives the key vault its passphrase for this process (chooses it for a new vault); a
    /// wrong one is refused with `KEYS_LOCKED`. Nothing to do when the OS keyring is in use.
    pub async fn unlock_keys(&self, passphrase: String) -> Result<()> {
        let engine = self.clone();
        crate::error::blocking(move || engine.inner.keys.unlock(&passphrase)).await
    }
}

/// What a person asks for in `model add`.
#[derive(Debug, Clone, Serialize)]
pub struct NewModel {
    pub id: String,
    pub kind: ModelKind,
    pub model: String,
    pub base_url: Option<String>,
    /// How it gives screen coordinates; None: what its family was trained on
    /// ([`CoordSpace::default_for`]).
    pub coordinates: Option<CoordSpace>,
}

impl NewModel {
    fn validate(&self, has_key: bool) -> Result<()> {
        let id_ok = !self.id.is_empty() && self.id.len() <= 64 && self.id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !id_ok {
            return Err(EngineError::invalid(format!("a model id is 1–64 letters, digits, '-', '_' or '.', not {:?}", self.id)));
        }
        if self.model.trim().is_empty() || self.model.len() > 200 {
            return Err(EngineError::invalid("name the model, e.g. claude-sonnet-4-5 or gpt-4o"));
        }
        match &self.base_url {
            Some(u) => {
                if !(u.starts_with("http://") || u.starts_with("https://")) || u.contains(char::is_whitespace) {
                    return Err(EngineError::invalid(format!("the base URL must be an http:// or https:// address, not {u:?}")));
                }
                let host = u.split("://").nth(1).unwrap_or("").split('/').next().unwrap_or("");
                if host.contains('@') {
                    return Err(EngineError::invalid("the base URL must not carry credentials; the key is asked for separately"));
                }
            }
            None if self.kind == ModelKind::OpenAiCompatible => {
                return Err(EngineError::invalid("an OpenAI-compatible model needs --base-url (e.g. http://localhost:11434/v1)"))
            }
            None => {}
        }
        if !has_key && self.kind != ModelKind::OpenAiCompatible {
            return Err(EngineError::invalid(format!("an {} model needs an API key", self.kind)));
        }
        if let (true, Some(u)) = (has_key, &self.base_url) {
            botdesk_agent::key_may_go_to(u).map_err(EngineError::invalid)?;
        }
        Ok(())
    }
}

impl Engine {
    /// What the table of models says of each model added: known, or given its family's defaults
    /// (`doctor` says which, so a person knows the prices, window and dialect are guesses).
    pub(crate) async fn check_models(&self) -> Vec<botdesk_core::machine::Check> {
        let Ok(models) = self.inner.store.list_models().await else { return vec![] };
        models
            .into_iter()
            .map(|m| {
                let l = botdesk_core::models::lookup_for(m.kind.as_str(), &m.model);
                let name = format!("model {}", m.id);
                if l.known {
                    botdesk_core::machine::Check::pass(name, format!("{} is in the table of models (checked {})", m.model, l.info.checked))
                } else {
                    let family = if l.info.prefix.is_empty() { "a local server's".to_string() } else { format!("the {} family's", l.info.prefix) };
                    botdesk_core::machine::Check::warn(
                        name,
                        format!("{} is not in the table of models: it gets {family} defaults (window, output, how it points)", m.model),
                        format!("set what you know: `botdesk model limits {id} --context N`, `botdesk model prices {id} …`, and find how it points with `botdesk model calibrate {id} --bot BOT`", id = m.id),
                    )
                }
            })
            .collect()
    }

    /// Adds a model provider; its key (if any) goes to the OS keyring only.
    pub async fn add_model(&self, new: NewModel, key: Option<String>) -> Result<ModelView> {
        let key = key.map(|k| k.trim().to_string()).filter(|k| !k.is_empty());
        new.validate(key.is_some())?;
        if self.inner.store.model(&new.id).await.is_ok() {
            return Err(EngineError::new(ErrorCode::Conflict, format!("a model named {:?} already exists", new.id)));
        }
        if let Some(k) = key.clone() {
            with_entry(self, &new.id, move |e| e.set_password(&k)).await?;
        }
        let coordinates = new.coordinates.unwrap_or_else(|| CoordSpace::default_for(&new.model));
        let row =
            ModelView { id: new.id.clone(), kind: new.kind, model: new.model.trim().to_string(), base_url: new.base_url, has_key: key.is_some(), coordinates };
        if let Err(e) = self.inner.store.add_model(&row, self.now()).await {
            if key.is_some() {
                // Undo: the row did not land.
                let _ = with_entry(self, &new.id, |e| e.delete_credential()).await;
            }
            return Err(e.into());
        }
        // Known list prices, so a run's cost shows from the start (`model prices` changes them).
        self.inner.store.set_model_prices(&row.id, Prices::default_for(&row.model).as_ref()).await?;
        Ok(row)
    }

    /// A model's prices (dollars per million tokens), when known.
    pub async fn model_prices(&self, id: &str) -> Result<Option<Prices>> {
        let m = self.inner.store.model(id).await?;
        Ok(self.inner.store.model_prices(&m.id).await?)
    }

    /// A model's context window and output tokens per call: as set, or its family's defaults.
    pub async fn model_limits(&self, id: &str) -> Result<Limits> {
        let m = self.inner.store.model(id).await?;
        Ok(self.inner.store.model_limits(&m.id).await?.unwrap_or_else(|| Limits::default_for(m.kind.as_str(), &m.model)))
    }

    /// How a model thinks, as its runs ask for it: the table of models' default, or the
    /// extended budget the person set.
    pub async fn model_thinking(&self, id: &str) -> Result<botdesk_core::models::Thinking> {
        let m = self.inner.store.model(id).await?;
        if m.kind != ModelKind::Anthropic {
            return Ok(botdesk_core::models::Thinking::None);
        }
        let set = self.inner.store.model_limits(&m.id).await?.and_then(|l| l.thinking);
        Ok(botdesk_core::models::lookup_for(m.kind.as_str(), &m.model).info.thinking(set))
    }

    /// Sets (or with None, goes back to the family's defaults) a model's context window, output
    /// tokens per call and thinking budget.
    pub async fn set_model_limits(&self, id: &str, limits: Option<Limits>) -> Result<Limits> {
        if let Some(l) = limits {
            if !(1_024..=10_000_000).contains(&l.context_window) || l.max_output == 0 || l.max_output >= l.context_window {
                return Err(EngineError::invalid("a context window is 1,024 to 10,000,000 tokens, and the output per call is less than it"));
            }
            if l.thinking.is_some_and(|t| t != 0 && !(1024..=l.context_window / 2).contains(&(t as u64))) {
                return Err(EngineError::invalid("a thinking budget is at least 1,024 tokens (and at most half the context window), or 0 for off"));
            }
        }
        let m = self.inner.store.model(id).await?;
        self.inner.store.set_model_limits(&m.id, limits.as_ref()).await?;
        self.model_limits(id).await
    }

    /// One model, as listed.
    pub async fn model(&self, id: &str) -> Result<ModelView> {
        Ok(self.inner.store.model(id).await?)
    }

    /// Sets how a model gives screen coordinates (None: what its family was trained on); later
    /// runs use it.
    pub async fn set_model_coordinates(&self, id: &str, coordinates: Option<CoordSpace>) -> Result<ModelView> {
        let m = self.inner.store.model(id).await?;
        let c = coordinates.unwrap_or_else(|| CoordSpace::default_for(&m.model));
        self.inner.store.set_model_coordinates(&m.id, c).await?;
        Ok(self.inner.store.model(&m.id).await?)
    }

    /// Sets (or with None, forgets) a model's prices; later calls are costed with them.
    pub async fn set_model_prices(&self, id: &str, prices: Option<Prices>) -> Result<()> {
        if let Some(p) = prices {
            if [p.input, p.output, p.cache_read, p.cache_write].iter().any(|v| !(v.is_finite() && *v >= 0.0 && *v < 1e6)) {
                return Err(EngineError::invalid("prices are dollars per million tokens, from 0 up"));
            }
        }
        let m = self.inner.store.model(id).await?;
        Ok(self.inner.store.set_model_prices(&m.id, prices.as_ref()).await?)
    }

    pub async fn list_models(&self) -> Result<Vec<ModelView>> {
        Ok(self.inner.store.list_models().await?)
    }

    /// Removes a model no bot uses, and its key from the keyring.
    pub async fn remove_model(&self, id: &str) -> Result<()> {
        let m = self.inner.store.model(id).await?;
        self.inner.store.remove_model(id).await?;
        if m.has_key {
            with_entry(self, id, |e| match e.delete_credential() {
                Err(keyring_core::Error::NoEntry) => Ok(()),
                other => other,
            })
            .await?;
        }
        Ok(())
    }

    /// The model's API key from the keyring (None for a keyless local server). For the agent's
    /// model clients only; never print it.
    pub async fn model_key(&self, id: &str) -> Result<Option<String>> {
        let m = self.inner.store.model(id).await?;
        if !m.has_key {
            return Ok(None);
        }
        let id = m.id.clone();
        match with_entry(self, &id, |e| e.get_password()).await {
            Ok(k) => Ok(Some(k)),
            Err(e) => Err(e.context(format!("reading the key of model {id:?}"))),
        }
    }
}

/// What one tiny request to a model gave (`botdesk model test`, the app's Test): its answer, how
/// long the whole request took, and what it cost (when the model has prices).
#[derive(Debug, Clone, Serialize, ts_rs::TS)]
pub struct ModelCheck {
    pub answer: String,
    pub ms: u64,
    pub usage: botdesk_core::Usage,
    pub usd: Option<f64>,
}

struct Quiet;
impl botdesk_agent::Listener for Quiet {}

impl Engine {
    /// Sends a stored model one tiny request, as a run would (its key, its limits, Botdesk's
    /// tools declared but not to be called), and says what came back; a key, address or model
    /// the provider refuses is the error, with its fix.
    pub async fn test_model(&self, id: &str) -> Result<ModelCheck> {
        use botdesk_agent::{Message, Request, ToolChoice};
        let (client, m, _) = self.model_client(id).await?;
        let coords = if client.config().dialect.own_computer_tool() { CoordSpace::Pixels } else { m.coordinates };
        let specs = botdesk_agent::tools::specs(coords);
        let messages = vec![Message::user("This is a check that you can be reached. Reply with the single word OK.".to_string())];
        let req = Request {
            system: "You are a bot on a Linux desktop, checked by Botdesk before work.",
            messages: &messages,
            tools: &specs,
            tool_choice: ToolChoice::None,
        };
        let started = std::time::Instant::now();
        let cancel = tokio_util::sync::CancellationToken::new();
        let mut quiet = Quiet;
        let call = client.complete(&req, &mut quiet, &cancel);
        let turn = match tokio::time::timeout(std::time::Duration::from_secs(120), call).await {
            Ok(Ok(turn)) => turn,
            Ok(Err(e)) => return Err(EngineError::invalid(e.to_string())),
            Err(_) => return Err(EngineError::new(ErrorCode::TimedOut, format!("{id} did not answer within 2 minutes"))),
        };
        let ms = started.elapsed().as_millis() as u64;
        let usd = self.inner.store.model_prices(&m.id).await?.map(|p| p.cost(&turn.usage));
        Ok(ModelCheck { answer: turn.text.trim().chars().take(500).collect(), ms, usage: turn.usage, usd })
    }
}
