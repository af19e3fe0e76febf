//! Workspace path rules. Every path that enters a computer (tool calls, CLI, UI, imports) is parsed
//! here first; nothing downstream accepts a raw string.

use serde::{Deserialize, Serialize};
use std::fmt;

use crate::types::{BotId, ComputerScope};

/// Where the workspace (the computer's persistent home) lives inside the computer.
pub const HOME: &str = "/home/botdesk";

const MAX_COMPONENT: usize = 255;
const MAX_PATH: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("{0:?} escapes the computer workspace")]
    Escapes(String),
    #[error("{path:?} is not a valid workspace path: {why}")]
    Invalid { path: String, why: &'static str },
}

/// A normalised path relative to the workspace root: no `.`/`..` components, no backslashes, no
/// empty components. The empty path is the root.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default, ts_rs::TS)]
#[serde(try_from = "String", into = "String")]
#[ts(as = "String")]
pub struct WorkspacePath(String);

impl WorkspacePath {
    pub fn root() -> Self {
        Self(String::new())
    }

    /// Parses a path given by a person, a bot or an import. Relative paths are relative to the
    /// workspace root; absolute paths are accepted only inside [`HOME`] (and `~`).
    pub fn parse(input: &str) -> Result<Self, PathError> {
        let escapes = || PathError::Escapes(input.to_string());
        if input.contains('\0') {
            return Err(PathError::Invalid { path: input.into(), why: "it contains a NUL byte" });
        }
        if input.len() > MAX_PATH {
            return Err(PathError::Invalid { path: input.into(), why: "it is longer than 4096 bytes" });
        }
        if input.contains('\\') {
            return Err(escapes());
        }
        let rest = if let Some(r) = input.strip_prefix('~') {
            if !(r.is_empty() || r.starts_with('/')) {
                return Err(escapes()); // ~otheruser
            }
            r.trim_start_matches('/')
        } else if input.starts_with('/') {
            match input.strip_prefix(HOME) {
                Some("") => "",
                Some(r) if r.starts_with('/') => r.trim_start_matches('/'),
                _ => return Err(escapes()),
            }
        } else {
            input
        };
        let mut parts = Vec::new();
        for part in rest.split('/') {
            match part {
                "" => continue,
                "." | ".." => return Err(escapes()),
                p if p.len() > MAX_COMPONENT => return Err(PathError::Invalid { path: input.into(), why: "a component is longer than 255 bytes" }),
                p => parts.push(p),
            }
        }
        Ok(Self(parts.join("/")))
    }

    /// `self` joined with a relative path given by a caller (parsed by the same rules).
    pub fn join(&self, rel: &str) -> Result<Self, PathError> {
        if rel.starts_with('/') || rel.starts_with('~') {
            return Self::parse(rel);
        }
        let child = Self::parse(rel)?;
        Ok(self.join_path(&child))
    }

    /// The entry `name` of this folder, taken literally (a listing's name, never a path): one
    /// component, so `~` is a file called `~`. Refused when it is not one component, or when it
    /// would read back as something else (`~` at the root is the root).
    pub fn child(&self, name: &str) -> Result<Self, PathError> {
        let invalid = |why| PathError::Invalid { path: name.into(), why };
        match name {
            "" | "." | ".." => Err(invalid("it is not a name")),
            n if n.contains(['/', '\\', '\0']) => Err(invalid("a name holds no slash, backslash or NUL")),
            n if n.len() > MAX_COMPONENT => Err(invalid("a component is longer than 255 bytes")),
            n if n.starts_with('~') && self.is_root() => Err(invalid("at the root it would read as the home")),
            n => Ok(self.join_path(&Self(n.to_string()))),
        }
    }

    pub fn join_path(&self, child: &WorkspacePath) -> Self {
        match (self.is_root(), child.is_root()) {
            (true, _) => child.clone(),
            (_, true) => self.clone(),
            _ => Self(format!("{}/{}", self.0, child.0)),
        }
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/').filter(|c| !c.is_empty())
    }
    pub fn parent(&self) -> Option<Self> {
        if self.is_root() {
            return None;
        }
        Some(match self.0.rfind('/') {
            Some(i) => Self(self.0[..i].to_string()),
            None => Self::root(),
        })
    }
    pub fn file_name(&self) -> Option<&str> {
        self.components().last()
    }
    pub fn starts_with(&self, prefix: &WorkspacePath) -> bool {
        prefix.is_root() || self.0 == prefix.0 || self.0.starts_with(&format!("{}/", prefix.0))
    }
    /// The absolute path inside the computer.
    pub fn in_computer(&self) -> String {
        if self.is_root() {
            HOME.to_string()
        } else {
            format!("{HOME}/{}", self.0)
        }
    }

    /// Where a symlink at `self` pointing at `target` lands, if it stays inside the workspace.
    /// `None` means the link is external: it is never followed, listed or exported.
    pub fn symlink_destination(&self, target: &str) -> Option<WorkspacePath> {
        if target.is_empty() || target.contains('\0') {
            return None;
        }
        let (mut parts, rest): (Vec<String>, &str) = if target.starts_with('/') {
            match target.strip_prefix(HOME) {
                Some(r) if r.is_empty() || r.starts_with('/') => (vec![], r),
                _ => return None,
            }
        } else {
            let parent = self.parent().unwrap_or_default();
            (parent.components().map(str::to_string).collect(), target)
        };
        for part in rest.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    parts.pop()?;
                }
                p => parts.push(p.to_string()),
            }
        }
        Some(Self(parts.join("/")))
    }
}

impl fmt::Display for WorkspacePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_root() {
            f.write_str(".")
        } else {
            f.write_str(&self.0)
        }
    }
}

impl TryFrom<String> for WorkspacePath {
    type Error = PathError;
    fn try_from(s: String) -> Result<Self, PathError> {
        Self::parse(&s)
    }
}
impl From<WorkspacePath> for String {
    fn from(p: WorkspacePath) -> String {
        p.0
    }
}

/// The one rule for paths a bot (or the CLI/UI on its behalf) gives: on a Team computer a relative
/// path lives in the bot's own folder `bots/<bot-id>/`, except that `shared/…` and `bots/…` address
/// the Team root; absolute paths inside the home are taken as they are. On a Private computer the
/// whole home is the bot's, so relative paths start at the root.
pub fn resolve_for_bot(scope: ComputerScope, bot: &BotId, input: &str) -> Result<WorkspacePath, PathError> {
    let parsed = WorkspacePath::parse(input)?;
    let absolute = input.starts_with('/') || input.starts_with('~');
    if absolute || scope == ComputerScope::Private {
        return Ok(parsed);
    }
    let first = parsed.components().next().map(str::to_string);
    match first.as_deref() {
        Some("shared") | Some("bots") => Ok(parsed),
        _ => Ok(bot_folder(bot).join_path(&parsed)),
    }
}

/// `bots/<bot-id>`: a bot's own folder on a Team computer.
pub fn bot_folder(bot: &BotId) -> WorkspacePath {
    WorkspacePath(format!("bots/{}", bot.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_childs_name_is_taken_literally() {
        let dir = WorkspacePath::parse("shared/x").unwrap();
        assert_eq!(dir.child("~").unwrap().as_str(), "shared/x/~");
        assert_eq!(WorkspacePath::parse(dir.child("~").unwrap().as_str()).unwrap(), dir.child("~").unwrap(), "it reads back as itself");
        assert_eq!(WorkspacePath::root().child("notes.md").unwrap().as_str(), "notes.md");
        for bad in ["", ".", "..", "a/b", "a\\b", "a\0b"] {
            assert!(dir.child(bad).is_err(), "{bad:?}");
        }
        assert!(WorkspacePath::root().child("~").is_err() && WorkspacePath::root().child("~x").is_err());
    }

    #[test]
    fn accepts_and_normalises() {
        assert_eq!(WorkspacePath::parse("a//b/").unwrap().as_str(), "a/b");
        assert_eq!(WorkspacePath::parse("").unwrap(), WorkspacePath::root());
        assert_eq!(WorkspacePath::parse("/home/botdesk/x/y").unwrap().as_str(), "x/y");
        assert_eq!(WorkspacePath::parse("/home/botdesk").unwrap().as_str(), "");
        assert_eq!(WorkspacePath::parse("~/x").unwrap().as_str(), "x");
        assert_eq!(WorkspacePath::parse("..hidden/x..y").unwrap().as_str(), "..hidden/x..y");
    }

    #[test]
    fn rejects_escapes_with_one_message() {
        for bad in ["..", "a/../b", ".", "./a", "a/./b", "/etc/passwd", "/home/botdeskx/a", "a\\..\\b", "C:\\x", "~root/x", "/"] {
            let err = WorkspacePath::parse(bad).unwrap_err();
            assert!(err.to_string().ends_with("escapes the computer workspace"), "{bad}: {err}");
        }
        assert!(matches!(WorkspacePath::parse("a\0b"), Err(PathError::Invalid { .. })));
    }

    #[test]
    fn symlink_destinations() {
        let link = WorkspacePath::parse(".local/bin/tool").unwrap();
        assert_eq!(link.symlink_destination("../share/x").unwrap().as_str(), ".local/share/x");
        assert_eq!(link.symlink_destination("/home/botdesk/.local/share/x").unwrap().as_str(), ".local/share/x");
        assert_eq!(link.symlink_destination("/etc/passwd"), None);
        assert_eq!(link.symlink_destination("../../../../etc"), None);
        assert_eq!(link.symlink_destination("/home/botdeskevil"), None);
    }

    #[test]
    fn bot_relative_resolution() {
        let bot = BotId::new("b1");
        let r = |s, i| resolve_for_bot(s, &bot, i).unwrap().as_str().to_string();
        assert_eq!(r(ComputerScope::Team, "notes.txt"), "bots/b1/notes.txt");
        assert_eq!(r(ComputerScope::Team, ""), "bots/b1");
        assert_eq!(r(ComputerScope::Team, "shared/out.csv"), "shared/out.csv");
        assert_eq!(r(ComputerScope::Team, "bots/b2/x"), "bots/b2/x");
        assert_eq!(r(ComputerScope::Team, "/home/botdesk/a"), "a");
        assert_eq!(r(ComputerScope::Private, "notes.txt"), "notes.txt");
        assert!(resolve_for_bot(ComputerScope::Team, &bot, "../x").is_err());
    }
}
