//! A VNC viewer's login to `botdesk screen forward`, shared by the CLI's tests.

/// Logs in to a `screen forward` as a VNC viewer does (RFB 3.8, VNC authentication) and
/// returns the screen's size from ServerInit.
pub fn login(viewer: &mut std::net::TcpStream, password: &str) -> (u16, u16) {
    use des::cipher::{BlockEncrypt, KeyInit};
    use std::io::{Read, Write};
    let mut greeting = [0u8; 12];
    viewer.read_exact(&mut greeting).unwrap();
    assert_eq!(&greeting, b"RFB 003.008\n");
    viewer.write_all(b"RFB 003.008\n").unwrap();
    let mut n = [0u8; 1];
    viewer.read_exact(&mut n).unwrap();
    let mut types = vec![0u8; n[0] as usize];
    viewer.read_exact(&mut types).unwrap();
    assert_eq!(types, [2], "only VNC authentication is offered");
    viewer.write_all(&[2]).unwrap();
    let mut challenge = [0u8; 16];
    viewer.read_exact(&mut challenge).unwrap();
    let mut key = [0u8; 8];
    for (k, b) in key.iter_mut().zip(password.bytes()) {
        *k = b.reverse_bits();
    }
    let des = des::Des::new(&key.into());
    for half in challenge.chunks_exact_mut(8) {
        des.encrypt_block(half.into());
    }
    viewer.write_all(&challenge).unwrap();
    let mut result = [0u8; 4];
    viewer.read_exact(&mut result).unwrap();
    assert_eq!(result, [0, 0, 0, 0], "the password is accepted");
    viewer.write_all(&[1]).unwrap(); // ClientInit: shared
    let mut init = [0u8; 4];
    viewer.read_exact(&mut init).unwrap();
    (u16::from_be_bytes([init[0], init[1]]), u16::from_be_bytes([init[2], init[3]]))
}
