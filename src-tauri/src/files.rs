//! The Files and Terminal panes: the workspace (live through the computer, or its latest checkpoint
//! offline), previews, download, upload while in control, a watch that tells the visible pane when
//! the bot wrote something, and the activity list.

use std::path::PathBuf;
use std::sync::Mutex;
use tokio_util::sync::CancellationToken;

use base64::Engine as _;
use botdesk_engine::dto::{ActivityRow, EngineError, ErrorCode, FileKind, History, Listing, Preview, RestoreReport};
use botdesk_engine::Engine;
use tauri::{AppHandle, Emitter, State};

type Res<T> = Result<T, EngineError>;

const TEXT_PREVIEW: u64 = 2 << 20;
const IMAGE_PREVIEW: u64 = 10 << 20;
/// Uploads are limited to this by default.
pub const UPLOAD_LIMIT: u64 = 10 << 20;

fn image_type(path: &str) -> Option<&'static str> {
    let ext = path.rsplit('.').next()?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        "bmp" => "image/bmp",
        _ => return None,
    })
}

#[tauri::command]
pub async fn activity(engine: State<'_, Engine>, bot: String) -> Res<Vec<ActivityRow>> {
    engine.latest_activity(&engine.bot_ref(&bot).await?, 300).await
}

/// A folder of the workspace as it is, or in a kept `version` of it.
#[tauri::command]
pub async fn list_files(engine: State<'_, Engine>, bot: String, path: String, version: Option<u64>) -> Res<Listing> {
    let (path, entries) = engine.stored_list_at(&engine.bot_ref(&bot).await?, &path, version).await?;
    Ok(Listing { path, entries })
}

/// Text (UTF-8, up to 2 MiB) or an image (up to 10 MiB) from the stored workspace (or a version).
#[tauri::command]
pub async fn preview_file(engine: State<'_, Engine>, bot: String, path: String, version: Option<u64>) -> Res<Preview> {
    let me = engine.bot_ref(&bot).await?;
    let stat = engine.stored_stat_at(&me, &path, version).await?;
    let size = stat.size;
    if stat.kind == FileKind::Dir {
        return Ok(Preview::Dir { size });
    }
    if let Some(mime) = image_type(&path) {
        if size > IMAGE_PREVIEW {
            return Ok(Preview::TooLarge { size });
        }
        let data = engine.stored_read_at(&me, &path, IMAGE_PREVIEW, version).await?;
        return Ok(Preview::Image { url: format!("data:{mime};base64,{}", base64::engine::general_purpose::STANDARD.encode(&data)), size });
    }
    if size > TEXT_PREVIEW {
        return Ok(Preview::TooLarge { size });
    }
    let data = engine.stored_read_at(&me, &path, TEXT_PREVIEW, version).await?;
    Ok(match String::from_utf8(data.to_vec()) {
        Ok(text) if !text.contains('\0') => Preview::Text { text, size },
        _ => Preview::Binary { size },
    })
}

fn downloads_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_DOWNLOAD_DIR") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    home.join("Downloads")
}

/// The largest file Download copies (it passes through memory): a larger one is refused with its
/// size (`botdesk files get` takes it).
pub const DOWNLOAD_LIMIT: u64 = 256 << 20;

/// Copies a file of the stored workspace (or a version) to the Downloads folder (works offline);
/// returns where.
#[tauri::command]
pub async fn download_file(engine: State<'_, Engine>, bot: String, path: String, version: Option<u64>) -> Res<String> {
    let me = engine.bot_ref(&bot).await?;
    let size = engine.stored_stat_at(&me, &path, version).await?.size;
    if size > DOWNLOAD_LIMIT {
        return Err(EngineError::new(
            ErrorCode::TooLarge,
            format!("{path} is {} MiB; Download takes files up to {} MiB (`botdesk files get` takes larger ones)", size >> 20, DOWNLOAD_LIMIT >> 20),
        ));
    }
    let data = engine.stored_read_at(&me, &path, DOWNLOAD_LIMIT, version).await?;
    let dir = downloads_dir();
    std::fs::create_dir_all(&dir).map_err(|e| EngineError::new(ErrorCode::Internal, format!("cannot create {}: {e}", dir.display())))?;
    let name = path.rsplit('/').next().filter(|n| !n.is_empty()).unwrap_or("download");
    let (stem, ext) = match name.rsplit_once('.') {
        Some((s, e)) if !s.is_empty() => (s.to_string(), format!(".{e}")),
        _ => (name.to_string(), String::new()),
    };
    let mut target = dir.join(name);
    let mut n = 1;
    while target.exists() {
        target = dir.join(format!("{stem} ({n}){ext}"));
        n += 1;
    }
    let partial = target.with_extension("botdesk-partial");
    std::fs::write(&partial, &data)
        .and_then(|_| std::fs::rename(&partial, &target))
        .map_err(|e| EngineError::new(ErrorCode::Internal, format!("cannot write {}: {e}", target.display())))?;
    Ok(target.display().to_string())
}

/// The versions of the bot's folder, newest first.
#[tauri::command]
pub async fn history(engine: State<'_, Engine>, bot: String) -> Res<History> {
    engine.history(&engine.bot_ref(&bot).await?).await
}

/// Puts the bot's folder (`path` None) or one path back as it was in `version`.
#[tauri::command]
pub async fn restore_version(engine: State<'_, Engine>, bot: String, version: u64, path: Option<String>) -> Res<RestoreReport> {
    engine.restore(&engine.bot_ref(&bot).await?, version, path.as_deref()).await
}

/// "Undo this run's file changes".
#[tauri::command]
pub async fn undo_run(engine: State<'_, Engine>, run: String) -> Res<RestoreReport> {
    engine.undo_run(&run).await
}

/// Upload (base64 from the webview) into the bot's workspace; only while the person has control.
#[tauri::command]
pub async fn upload_file(engine: State<'_, Engine>, bot: String, path: String, data: String) -> Res<String> {
    if data.len() as u64 > UPLOAD_LIMIT * 4 / 3 + 4 {
        return Err(EngineError::new(ErrorCode::TooLarge, format!("uploads are limited to {} MiB", UPLOAD_LIMIT >> 20)));
    }
    let bytes =
        base64::engine::general_purpose::STANDARD.decode(data.as_bytes()).map_err(|e| EngineError::invalid(format!("the upload is not valid base64: {e}")))?;
    engine.upload(&engine.bot_ref(&bot).await?, &path, bytes.into(), UPLOAD_LIMIT).await
}

/// The one watch of the bot whose Files pane is visible: its bot and how to stop it.
#[derive(Default)]
pub struct FileWatch(Mutex<Option<(String, CancellationToken)>>);

#[tauri::command]
pub async fn watch_files(app: AppHandle, engine: State<'_, Engine>, watch: State<'_, FileWatch>, bot: Option<String>) -> Res<()> {
    let id = match &bot {
        Some(b) => Some(engine.bot_ref(b).await?.id),
        None => None,
    };
    let mut current = watch.0.lock().unwrap();
    if current.as_ref().is_some_and(|(b, _)| Some(b) == bot.as_ref()) {
        return Ok(());
    }
    if let Some((_, stop)) = current.take() {
        stop.cancel();
    }
    let (Some(bot), Some(id)) = (bot, id) else { return Ok(()) };
    let stop = CancellationToken::new();
    let mut changes = engine.watch_workspace(&id, stop.clone());
    *current = Some((bot.clone(), stop));
    tauri::async_runtime::spawn(async move {
        while changes.recv().await.is_some() {
            let _ = app.emit("files-changed", &bot);
        }
    });
    Ok(())
}

/// Opens an interactive shell on the bot's computer (only while the person has control); what it
/// prints streams to `output` as bytes, and the channel gets an empty message when it ends.
#[tauri::command]
pub async fn terminal_open(engine: State<'_, Engine>, bot: String, cols: u16, rows: u16, output: tauri::ipc::Channel<Vec<u8>>) -> Res<String> {
    let mut t = engine.open_terminal(&engine.bot_ref(&bot).await?, cols, rows).await?;
    let id = t.id.clone();
    tauri::async_runtime::spawn(async move {
        while let Some(chunk) = t.output.recv().await {
            if output.send(chunk.to_vec()).is_err() {
                break;
            }
        }
        let _ = output.send(Vec::new());
    });
    Ok(id)
}

#[tauri::command]
pub async fn terminal_input(engine: State<'_, Engine>, id: String, data: String) -> Res<()> {
    engine.terminal_input(&id, data.into_bytes().into()).await
}

#[tauri::command]
pub async fn terminal_resize(engine: State<'_, Engine>, id: String, cols: u16, rows: u16) -> Res<()> {
    engine.terminal_resize(&id, cols, rows).await
}

#[tauri::command]
pub async fn terminal_close(engine: State<'_, Engine>, id: String) -> Res<()> {
    engine.close_terminal(&id);
    Ok(())
}
