//! The CLI's command groups (`botdesk image …`, `bot …`, `model …`, `host …`, `computer …`,
//! `control …`, `desktop …`): one function each, a few lines over the engine per command.

use super::*;

pub(crate) async fn image(engine: &Engine, json: bool, cmd: ImageCmd) -> Result<ExitCode, EngineError> {
    match cmd {
        ImageCmd::Send { host } => {
            let (bar, progress) = image_progress(json);
            let sent = engine.send_image(&host, &progress).await;
            bar.finish_and_clear();
            let (tag, sent) = (engine.image_tag(), sent?);
            print(json, json!({"image": tag, "host": host, "sent": sent}), || {
                if sent {
                    format!("sent {tag} to {host}")
                } else {
                    format!("{host} has {tag} already")
                }
            });
        }
        ImageCmd::Status => {
            let (tag, present) = (engine.image_tag(), engine.image_present().await?);
            print(json, json!({"image": tag, "present": present}), || format!("{tag} {}", if present { "present" } else { "missing" }));
        }
        ImageCmd::Build { force, refresh } => {
            let tag = engine.image_tag();
            if !force && !refresh && engine.image_present().await? {
                print(json, json!({"image": tag, "built": false, "present": true}), || format!("{tag} is already present"));
            } else {
                let image = build_image(engine, json, refresh).await?;
                print(json, json!({"image": image, "built": true, "present": true}), || format!("built {image}"));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn bot(engine: &Engine, json: bool, cmd: BotCmd) -> Result<ExitCode, EngineError> {
    match cmd {
        BotCmd::Create { name, computer, host, model, instructions } => {
            let scope = ComputerScope::parse(&computer).expect("clap checked it");
            let bot = engine.create_bot_on(&name, scope, &host, model.as_deref(), &instructions).await?;
            print(json, serde_json::to_value(&bot).unwrap(), || {
                let on = if host == "local" { String::new() } else { format!(" on host {host}") };
                format!("created bot {} ({}) on the {} computer {}{on}", bot.name, bot.id, computer, bot.computer.name)
            });
        }
        BotCmd::List => {
            let bots = engine.list_bots().await?;
            print(json, json!({ "bots": bots }), || {
                if bots.is_empty() {
                    return "no bots yet: botdesk bot create NAME".into();
                }
                bots.iter()
                    .map(|b| {
                        let on = if b.computer.host == "local" { String::new() } else { format!(" (host {})", b.computer.host) };
                        format!("{:<24} {:<14} {:<8} {}{on}", b.name, b.id, b.computer.scope.as_str(), b.computer.name)
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        BotCmd::Set { name, model, new_name } => {
            if model.is_none() && new_name.is_none() {
                return Err(EngineError::invalid("say what to change: --model ID, --name NEW (its budget: botdesk bot budget)"));
            }
            let b = engine.set_bot(&engine.bot_ref(&name).await?, new_name.as_deref(), model.as_deref()).await?;
            print(json, json!({ "bot": b }), || format!("{}: model {}", b.name, b.model.as_deref().unwrap_or("none")));
        }
        BotCmd::Budget { name, tokens, usd } => {
            let me = engine.bot_ref(&name).await?;
            if tokens.is_some() || usd.is_some() {
                let current = engine.bot_budget(&me).await?;
                let tokens = match tokens.as_deref() {
                    None => Some(current.tokens).filter(|t| *t != botdesk_engine::Budget::DEFAULT_TOKENS),
                    Some("default") => None,
                    Some(t) => Some(
                        t.replace([',', '_'], "")
                            .parse::<u64>()
                            .map_err(|_| EngineError::invalid(format!("--tokens takes a number of tokens or \"default\", not {t:?}")))?,
                    ),
                };
                let usd = match usd.as_deref() {
                    None => current.usd,
                    Some("none") => None,
                    Some(u) => Some(
                        u.trim_start_matches('$').parse::<f64>().map_err(|_| EngineError::invalid(format!("--usd takes dollars or \"none\", not {u:?}")))?,
                    ),
                };
                engine.set_bot_budget(&me, tokens, usd).await?;
            }
            let budget = engine.bot_budget(&me).await?;
            let (used, usd, unpriced) = engine.bot_usage(&me).await?;
            print(json, json!({"bot": name, "budget": budget, "spent": {"tokens": used, "usd": usd, "unpriced_calls": unpriced}}), || {
                let limit = budget.usd.map(|u| format!(" or ${u:.2}")).unwrap_or_default();
                let unpriced = if unpriced > 0 { format!(" ({unpriced} calls of models without prices not counted)") } else { String::new() };
                format!("each run of {name} may spend {} tokens{limit}\nits runs so far: {used} tokens, ${usd:.4}{unpriced}", budget.tokens)
            });
        }
        BotCmd::Network { name, policy } => {
            let me = engine.bot_ref(&name).await?;
            let policy = match policy.is_empty() {
                true => engine.bot_network(&me).await?,
                false => engine.set_bot_network(&me, botdesk_engine::NetPolicy::from_words(&policy).map_err(EngineError::invalid)?).await?,
            };
            print(json, json!({"bot": name, "network": policy}), || format!("{name}: {policy}"));
        }
        BotCmd::Approvals { name, policy } => {
            let me = engine.bot_ref(&name).await?;
            let approvals = match policy.is_empty() {
                true => engine.bot_approvals(&me).await?,
                false => {
                    let mut approvals = botdesk_engine::Approvals::from_words(&policy).map_err(EngineError::invalid)?;
                    // The "always" answers stay, unless the bot is to ask for nothing.
                    if approvals != botdesk_engine::Approvals::default() {
                        approvals.always = engine.bot_approvals(&me).await?.always;
                    }
                    engine.set_bot_approvals(&me, approvals).await?
                }
            };
            print(json, json!({"bot": name, "approvals": approvals}), || format!("{name} {approvals}"));
        }
        BotCmd::Mcp { cmd } => match cmd {
            BotMcpCmd::Add { bot, name, url, command } => {
                let server = engine.add_bot_mcp_server(&engine.bot_ref(&bot).await?, &name, command, url).await?;
                print(json, json!({ "server": server }), || format!("{bot} uses the MCP server {name} from its next run on; its tools are {name}__TOOL"));
            }
            BotMcpCmd::Ls { bot } => {
                let servers = engine.bot_mcp_servers(&engine.bot_ref(&bot).await?).await?;
                print(json, json!({ "servers": servers }), || {
                    if servers.is_empty() {
                        return format!("{bot} has no MCP servers: botdesk bot mcp add {bot} NAME -- COMMAND ARGS…");
                    }
                    servers.iter().map(|s| format!("{:<20} {}", s.name, s.url.clone().unwrap_or_else(|| s.command.join(" ")))).collect::<Vec<_>>().join("\n")
                });
            }
            BotMcpCmd::Rm { bot, name } => {
                engine.remove_bot_mcp_server(&engine.bot_ref(&bot).await?, &name).await?;
                print(json, json!({ "removed": name }), || format!("removed the MCP server {name} of {bot}"));
            }
        },
        BotCmd::Rm { name } => {
            let bot = engine.remove_bot(&engine.bot_ref(&name).await?.id).await?;
            print(json, json!({"removed": bot}), || format!("removed bot {}; its files stay in the workspace", bot.name));
        }
        BotCmd::Stop { name } => {
            let cancelled = engine.stop_bot(&engine.bot_ref(&name).await?.id).await?;
            print(json, json!({"bot": name, "cancelled_runs": cancelled}), || format!("stopped {name}; cancelled {} run(s)", cancelled.len()));
        }
        BotCmd::Switch { name, to, host } => {
            let r = engine.switch_bot_to(&engine.bot_ref(&name).await?, ComputerScope::parse(&to).expect("clap checked it"), host.as_deref()).await?;
            print(json, serde_json::to_value(&r).unwrap(), || {
                if r.from == r.to {
                    return format!("moved {}'s computer {} to host {}, with its home", r.bot, r.to, r.host);
                }
                let on = if r.host == "local" { String::new() } else { format!(" on host {}", r.host) };
                let mut out = format!(
                    "moved {} from computer {} to {}{on} ({} file(s) copied{}); {} keeps its home",
                    r.bot,
                    r.from,
                    r.to,
                    r.copied,
                    if r.profile { ", browser profile included" } else { "" },
                    r.from
                );
                for k in &r.kept_newer {
                    out.push_str(&format!("\nkept the newer {k} already on {}; the bot's older copy stays on {}", r.to, r.from));
                }
                out
            });
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn model(engine: &Engine, json: bool, cmd: ModelCmd) -> Result<ExitCode, EngineError> {
    match cmd {
        ModelCmd::Add { id, kind, model, base_url, coordinates } => {
            let key = read_key(&id)?;
            let coordinates = coordinates.as_deref().and_then(botdesk_engine::action::CoordSpace::parse);
            let kind = botdesk_core::ModelKind::parse(&kind).expect("clap checked it");
            let m = engine.add_model(botdesk_engine::NewModel { id, kind, model, base_url, coordinates }, key).await?;
            print(json, json!({ "model": m }), || {
                format!(
                    "added model {} ({} {}, coordinates in {}){}",
                    m.id,
                    m.kind,
                    m.model,
                    m.coordinates.as_str(),
                    if m.has_key { ", key in the OS keyring" } else { ", no key" }
                )
            });
        }
        ModelCmd::Prices { id, prices } => {
            match prices.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
                [] => {}
                ["none"] => engine.set_model_prices(&id, None).await?,
                [i, o, r, w] => {
                    let n = |v: &str| {
                        v.trim_start_matches('$').parse::<f64>().map_err(|_| EngineError::invalid(format!("a price is dollars per million tokens, not {v:?}")))
                    };
                    engine.set_model_prices(&id, Some(botdesk_engine::Prices { input: n(i)?, output: n(o)?, cache_read: n(r)?, cache_write: n(w)? })).await?
                }
                _ => return Err(EngineError::invalid("give four prices (input, output, cache read, cache write, in dollars per million tokens) or none")),
            }
            let p = engine.model_prices(&id).await?;
            print(json, json!({"model": id, "prices": p}), || match p {
                Some(p) => {
                    format!("{id}: ${} input, ${} output, ${} cache read, ${} cache write per million tokens", p.input, p.output, p.cache_read, p.cache_write)
                }
                None => format!("{id}: no prices (runs show tokens only; set them with `botdesk model prices {id} INPUT OUTPUT CACHE_READ CACHE_WRITE`)"),
            });
        }
        ModelCmd::Limits { id, context, max_output, thinking, default } => {
            let thinking = match thinking.as_deref() {
                None => None,
                Some("off") => Some(0),
                Some(n) => {
                    Some(n.parse::<u32>().map_err(|_| EngineError::invalid(format!("--thinking is a number of tokens (1024 or more) or off, not {n:?}")))?)
                }
            };
            if default {
                engine.set_model_limits(&id, None).await?;
            } else if context.is_some() || max_output.is_some() || thinking.is_some() {
                let now = engine.model_limits(&id).await?;
                let l = botdesk_engine::Limits {
                    context_window: context.unwrap_or(now.context_window),
                    max_output: max_output.unwrap_or(now.max_output),
                    thinking: thinking.or(now.thinking),
                };
                engine.set_model_limits(&id, Some(l)).await?;
            }
            let l = engine.model_limits(&id).await?;
            let thinks = engine.model_thinking(&id).await?;
            print(json, json!({"model": id, "limits": l, "thinking": thinks.to_string()}), || {
                format!("{id}: a {}-token context window, up to {} output tokens per call; thinking: {thinks}", l.context_window, l.max_output)
            });
        }
        ModelCmd::Calibrate { id, bot, set } => {
            let c = engine.calibrate(&id, &engine.bot_ref(&bot).await?).await?;
            if set {
                if let Some(best) = c.best {
                    engine.set_model_coordinates(&id, Some(best)).await?;
                }
            }
            print(json, json!({ "calibration": c, "set": set && c.best.is_some() }), || {
                let mut out = vec![];
                for t in &c.tries {
                    out.push(match (t.pointed, &t.said) {
                        (Some((x, y)), _) => format!("target {} at ({}, {}): the model pointed at ({x:.0}, {y:.0})", t.target, t.at.0, t.at.1),
                        (None, said) => {
                            format!("target {} at ({}, {}): the model pointed nowhere ({})", t.target, t.at.0, t.at.1, sanitize(said.as_deref().unwrap_or("")))
                        }
                    });
                }
                for f in &c.fits {
                    let off = if f.mean_error.is_finite() { format!("off by {:.0} px on average", f.mean_error) } else { "no point to score".into() };
                    out.push(format!("  {:<13} {off}", f.space.as_str()));
                }
                out.push(match (c.best, set) {
                    (Some(b), true) => format!("{id} points in {}: set", b.as_str()),
                    (Some(b), false) if b == c.current => format!("{id} points in {}, as set", b.as_str()),
                    (Some(b), false) => {
                        format!("{id} points in {} (set now: {}): set it with `botdesk model coordinates {id} {}`", b.as_str(), c.current.as_str(), b.as_str())
                    }
                    (None, _) => {
                        format!("no space fits within {:.0} px: {id}'s clicks do not land on what it means; try another model", botdesk_engine::FITS_WITHIN)
                    }
                });
                out.join("\n")
            });
        }
        ModelCmd::Coordinates { id, space, default } => {
            let m = match (space.as_deref().and_then(botdesk_engine::action::CoordSpace::parse), default) {
                (Some(c), _) => engine.set_model_coordinates(&id, Some(c)).await?,
                (None, true) => engine.set_model_coordinates(&id, None).await?,
                (None, false) => engine.model(&id).await?,
            };
            print(json, json!({"model": m.id, "coordinates": m.coordinates}), || format!("{}: coordinates in {}", m.id, m.coordinates.as_str()));
        }
        ModelCmd::Test { id } => {
            let check = engine.test_model(&id).await?;
            print(json, json!({ "model": id, "check": check }), || {
                let cost = check.usd.map(|u| format!(", ${u:.4}")).unwrap_or_default();
                format!(
                    "{id} answered in {} ms ({} tokens in, {} out{cost}): {}",
                    check.ms,
                    check.usage.input + check.usage.cache_read + check.usage.cache_write,
                    check.usage.output,
                    sanitize(&check.answer)
                )
            });
        }
        ModelCmd::List => {
            let models = engine.list_models().await?;
            print(json, json!({ "models": models }), || {
                if models.is_empty() {
                    return "no models yet: botdesk model add ID --kind anthropic --model NAME".into();
                }
                models
                    .iter()
                    .map(|m| {
                        format!(
                            "{:<20} {:<18} {:<28} {:<32} {:<7} {}",
                            m.id,
                            m.kind,
                            m.model,
                            m.base_url.as_deref().unwrap_or("-"),
                            m.coordinates.as_str(),
                            if m.has_key { "key" } else { "no key" }
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        ModelCmd::Rm { id } => {
            engine.remove_model(&id).await?;
            print(json, json!({ "removed": id }), || format!("removed model {id}"));
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn host(engine: &Engine, json: bool, cmd: HostCmd) -> Result<ExitCode, EngineError> {
    match cmd {
        HostCmd::Add { name, url, tls_dir } => {
            let (host, said) = engine.add_host(&name, &url, &tls_dir).await?;
            print(json, json!({ "host": host, "engine": said }), || format!("added host {name}: {said} answers at {url}"));
        }
        HostCmd::Ls => {
            let hosts = engine.list_hosts().await?;
            print(json, json!({ "hosts": hosts }), || {
                hosts
                    .iter()
                    .map(|h| format!("{:<16} {}{}", h.name, h.url, h.tls_dir.as_ref().map(|d| format!("  (certificates in {d})")).unwrap_or_default()))
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        HostCmd::Rm { name } => {
            engine.remove_host(&name).await?;
            print(json, json!({ "removed": name }), || format!("removed host {name}"));
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn computer(engine: &Engine, json: bool, cmd: ComputerCmd) -> Result<ExitCode, EngineError> {
    match cmd {
        ComputerCmd::Ls => {
            let computers = engine.list_computers().await?;
            let spares = engine.spares().await?;
            let spare_rows: Vec<_> = spares.iter().map(|(id, status)| json!({"id": id, "status": status})).collect();
            print(json, json!({ "computers": computers, "spares": spare_rows }), || {
                if computers.is_empty() && spares.is_empty() {
                    return "no computers yet: one is made with the first bot".into();
                }
                let rows =
                    computers.iter().map(|c| format!("{:<14} {:<20} {:<8} {:<8} {}", c.id, c.name, c.scope.as_str(), c.status.as_str(), c.bots.join(", ")));
                // The app starts one in advance for the next new bot.
                let spare = spares
                    .iter()
                    .map(|(id, status)| format!("{:<14} {:<20} {:<8} {:<8} (started in advance for the next new bot)", id, "spare", "spare", status.as_str()));
                rows.chain(spare).collect::<Vec<_>>().join("\n")
            });
        }
        ComputerCmd::Stop { id } => {
            let c = engine.stop_computer(&engine.computer_id(&id).await?).await?;
            print(json, serde_json::to_value(&c).unwrap(), || match &c.not_saved {
                None => format!("stopped computer {} ({}); its disk is kept", c.name, c.id),
                Some(why) => format!("stopped computer {} ({}); {why}; its disk keeps the work", c.name, c.id),
            });
        }
        ComputerCmd::Destroy { id, .. } if engine.remove_spare(&id).await? => {
            print(json, json!({ "removed_spare": id }), || {
                format!("removed the spare computer {id} (the app makes another while it runs, unless Settings → Spare computer is off)")
            });
        }
        ComputerCmd::Destroy { id, unsaved } => {
            let id = engine.computer_id(&id).await?;
            let c = if unsaved { engine.destroy_computer_unsaved(&id).await? } else { engine.destroy_computer(&id).await? };
            print(json, serde_json::to_value(&c).unwrap(), || match &c.not_saved {
                None => format!(
                    "destroyed computer {} ({}); its workspace is checkpointed in {} and comes back on the next use",
                    c.name,
                    c.id,
                    c.home.join("current").display()
                ),
                Some(why) => format!("destroyed computer {} ({}); {why}, and comes back on the next use", c.name, c.id),
            });
        }
        ComputerCmd::Checkpoint { id } => {
            let r = engine.checkpoint(&engine.computer_id(&id).await?).await?;
            print(json, serde_json::to_value(&r).unwrap(), || {
                let skipped = r.skipped.iter().map(|s| format!("\n  skipped {}: {}", s.path, s.why)).collect::<String>();
                format!("checkpoint v{}: {} files, {} bytes, {} written, {} ms{skipped}", r.version, r.files, r.bytes, r.copied, r.millis)
            });
        }
        ComputerCmd::IdleWatch => engine.watch_idle(std::time::Duration::from_secs(15)).await?,
        ComputerCmd::Reconcile => {
            let r = engine.reconcile().await?;
            print(json, serde_json::to_value(&r).unwrap(), || format!("adopted {}, removed {}", r.adopted.len(), r.removed.len()));
        }
        ComputerCmd::Release { id, confirm } => {
            let out = engine.release_computer(&engine.computer_id(&id).await?, confirm).await?;
            print(json, serde_json::to_value(&out).unwrap(), || match &out.reservation {
                None => format!("computer {} was not reserved", out.computer),
                Some(r) => format!("released computer {} ({} reservation, stage {})", out.computer, r.action, r.stage),
            });
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn control(engine: &Engine, json: bool, cmd: ControlCmd) -> Result<ExitCode, EngineError> {
    match cmd {
        ControlCmd::Take { bot: name, pause } => {
            let bot = engine.bot_ref(&name).await?;
            if pause {
                if !json {
                    eprintln!("pausing {name}: it finishes its current step first…");
                }
                engine.pause_run(&bot.id, botdesk_engine::PAUSE_WAIT).await?;
            }
            let lease = engine.take_control(&bot.id).await?;
            print(json, serde_json::to_value(&lease).unwrap(), || {
                format!("you have control of {name}'s screen until {} (lease {})", lease.expires_at, lease.lease_id)
            });
        }
        ControlCmd::Release { bot: name, skipped, note } => {
            let bot = engine.bot_ref(&name).await?;
            let Some(lease) = engine.control_of(&bot.id).await? else {
                return Err(EngineError::new(botdesk_engine::ErrorCode::Stale, format!("you do not have control of {name}'s screen")));
            };
            let result = if skipped { botdesk_engine::TakeoverResult::Skipped } else { botdesk_engine::TakeoverResult::Finished };
            let resumed = engine.release_control(&bot.id, &lease.lease_id, result, note.as_deref()).await?;
            print(json, json!({"released": lease.lease_id, "resumed_run": resumed}), || format!("released {name}'s screen"));
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn desktop(engine: &Engine, json: bool, cmd: DesktopCmd) -> Result<ExitCode, EngineError> {
    match cmd {
        DesktopCmd::Open { bot } => {
            let d = engine.open_desktop(&engine.bot_ref(&bot).await?).await?;
            print(json, serde_json::to_value(&d).unwrap(), || format!("{}'s desktop is display :{}", d.bot, d.slot));
        }
        DesktopCmd::Release { bot } => {
            let released = engine.release_desktop(&engine.bot_ref(&bot).await?).await?;
            print(json, json!({"bot": bot, "released": released}), || {
                if released {
                    format!("released {bot}'s desktop")
                } else {
                    format!("{bot} had no desktop open")
                }
            });
        }
    }
    Ok(ExitCode::SUCCESS)
}
