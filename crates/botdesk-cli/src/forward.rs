//! `botdesk screen forward`: a loopback port that a stock VNC viewer opens with a password.
//!
//! Every connection first reaches the computer's screen gateway (presenting the view or control
//! token, which never leaves this process), then the viewer must pass VNC authentication (RFB
//! 3.3, 3.7 and 3.8, security type 2) with the password this forward drew and printed once to
//! the person; only then does it see the screen. Another local user who finds the port gets a
//! challenge it cannot answer.

use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// How long the gateway and the computer's VNC server have to answer.
const UPSTREAM: Duration = Duration::from_secs(10);
/// How long a viewer has to answer the challenge (a person may be typing the password).
const VIEWER: Duration = Duration::from_secs(120);
/// The RFB version this side speaks to the computer.
const VERSION: &[u8; 12] = b"RFB 003.008\n";
const SECURITY_NONE: u8 = 1;
const SECURITY_VNC: u8 = 2;

/// The one password of a forward: 8 letters and digits (VNC authentication uses 8 bytes).
pub struct Password(String);

impl Password {
    pub fn new() -> Self {
        const ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
        let mut random = [0u8; 8];
        crate::urandom(&mut random);
        // 256 is not a multiple of 56: a bias under 1 %, which costs under a bit of the ~46.
        Password(random.iter().map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char).collect())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The answer to a VNC authentication challenge: the challenge's two halves encrypted with DES
/// under the password (zero-padded to 8 bytes, each byte's bits reversed, as every VNC does).
pub fn answer(password: &[u8], challenge: &[u8; 16]) -> [u8; 16] {
    use des::cipher::{BlockEncrypt, KeyInit};
    let mut key = [0u8; 8];
    for (k, b) in key.iter_mut().zip(password) {
        *k = b.reverse_bits();
    }
    let des = des::Des::new(&key.into());
    let mut out = *challenge;
    for half in out.chunks_exact_mut(8) {
        des.encrypt_block(half.into());
    }
    out
}

/// Serves one viewer: the gateway first (so a screen that is gone greets nobody), then the
/// viewer's password, then the computer's own handshake, then plain copying both ways.
pub async fn serve<V, U>(mut viewer: V, mut upstream: U, token: &str, password: &Password) -> Result<(), String>
where
    V: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let mut server_version = [0u8; 12];
    bounded(UPSTREAM, "the screen gateway", async {
        botdesk_core::gateway::present(&mut upstream, token).await?;
        upstream.read_exact(&mut server_version).await.map_err(|e| format!("the screen: {e}"))
    })
    .await?;
    if !server_version.starts_with(b"RFB 003.") {
        return Err("the screen did not speak RFB".into());
    }
    let minor = bounded(VIEWER, "the viewer", authenticate(&mut viewer, password)).await?;
    let ready = bounded(UPSTREAM, "the screen", async {
        upstream.write_all(VERSION).await.map_err(|e| format!("the screen: {e}"))?;
        let n = upstream.read_u8().await.map_err(|e| format!("the screen: {e}"))?;
        let mut types = vec![0u8; n as usize];
        upstream.read_exact(&mut types).await.map_err(|e| format!("the screen: {e}"))?;
        if !types.contains(&SECURITY_NONE) {
            return Err(format!("the screen offered security types {types:?}, not None"));
        }
        upstream.write_u8(SECURITY_NONE).await.map_err(|e| format!("the screen: {e}"))?;
        match upstream.read_u32().await.map_err(|e| format!("the screen: {e}"))? {
            0 => Ok(()),
            _ => Err("the screen refused the connection".to_string()),
        }
    })
    .await;
    if let Err(why) = ready {
        let _ = refuse(&mut viewer, minor, &why).await;
        return Err(why);
    }
    viewer.write_u32(0).await.map_err(|e| format!("the viewer: {e}"))?;
    let _ = tokio::io::copy_bidirectional(&mut viewer, &mut upstream).await;
    Ok(())
}

/// VNC authentication with the viewer; returns the RFB minor version it chose. The answer to a
/// right password is sent later, once the computer's side is ready too.
async fn authenticate<V: AsyncRead + AsyncWrite + Unpin>(viewer: &mut V, password: &Password) -> Result<u8, String> {
    let io = |e: std::io::Error| format!("the viewer: {e}");
    viewer.write_all(VERSION).await.map_err(io)?;
    let mut version = [0u8; 12];
    viewer.read_exact(&mut version).await.map_err(io)?;
    let minor = match &version {
        b"RFB 003.003\n" => 3,
        b"RFB 003.007\n" => 7,
        v if v.starts_with(b"RFB 003.") => 8,
        _ => return Err(format!("the viewer did not speak RFB: {:?}", String::from_utf8_lossy(&version))),
    };
    if minor == 3 {
        viewer.write_u32(SECURITY_VNC as u32).await.map_err(io)?;
    } else {
        viewer.write_all(&[1, SECURITY_VNC]).await.map_err(io)?;
        let chosen = viewer.read_u8().await.map_err(io)?;
        if chosen != SECURITY_VNC {
            let _ = refuse(viewer, minor, "this forward needs VNC authentication (a password)").await;
            return Err(format!("the viewer chose security type {chosen}, not VNC authentication"));
        }
    }
    let mut challenge = [0u8; 16];
    crate::urandom(&mut challenge);
    viewer.write_all(&challenge).await.map_err(io)?;
    let mut response = [0u8; 16];
    viewer.read_exact(&mut response).await.map_err(io)?;
    let expected = answer(password.as_str().as_bytes(), &challenge);
    if response.iter().zip(expected).fold(0u8, |acc, (a, b)| acc | (a ^ b)) != 0 {
        let _ = refuse(viewer, minor, "wrong password").await;
        return Err("a viewer gave a wrong password".into());
    }
    Ok(minor)
}

/// SecurityResult "failed", with its reason where the version has one (3.8).
async fn refuse<V: AsyncWrite + Unpin>(viewer: &mut V, minor: u8, why: &str) -> std::io::Result<()> {
    viewer.write_u32(1).await?;
    if minor >= 8 {
        viewer.write_u32(why.len() as u32).await?;
        viewer.write_all(why.as_bytes()).await?;
    }
    viewer.flush().await
}

async fn bounded<T>(limit: Duration, who: &str, work: impl std::future::Future<Output = Result<T, String>>) -> Result<T, String> {
    tokio::time::timeout(limit, work).await.unwrap_or_else(|_| Err(format!("{who} did not answer within {} s", limit.as_secs())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector every VNC implementation agrees on: `vncpasswd -f` stores a password as the
    /// answer to the challenge "the password itself", with the fixed key {23,82,107,6,35,78,88,7}
    /// for a password: "password" is stored as dbd83cfd727a1458 (TigerVNC 1.12, measured).
    #[test]
    fn the_des_answer_matches_the_vnc_convention() {
        const STORED: [u8; 8] = [0xdb, 0xd8, 0x3c, 0xfd, 0x72, 0x7a, 0x14, 0x58];
        let fixed: [u8; 8] = [23, 82, 107, 6, 35, 78, 88, 7];
        let got = answer(&fixed, b"passwordpassword");
        assert_eq!(got[..8], STORED);
        assert_eq!(got[..8], got[8..], "each half on its own");
        assert_ne!(answer(b"passwore", b"passwordpassword")[..8], STORED);
    }

    #[test]
    fn passwords_are_eight_letters_or_digits_and_differ() {
        let (a, b) = (Password::new(), Password::new());
        assert_eq!(a.as_str().len(), 8);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a.as_str(), b.as_str());
    }
}
