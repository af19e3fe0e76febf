//! Server-sent events, as both wire formats stream them.

/// One event: its `event:` name (empty when absent) and its joined `data:` lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub name: String,
    pub data: String,
}

/// Feeds bytes in, takes whole events out. Bytes may split anywhere, even inside a UTF-8 character.
#[derive(Default)]
pub struct Parser {
    buf: Vec<u8>,
}

/// More than this without an event boundary is not an event stream.
const MAX_EVENT: usize = 16 << 20;

impl Parser {
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<Event>, String> {
        self.buf.extend_from_slice(bytes);
        let mut out = vec![];
        while let Some((end, sep)) = boundary(&self.buf) {
            let raw: Vec<u8> = self.buf.drain(..end + sep).collect();
            let text = String::from_utf8_lossy(&raw[..end]);
            if let Some(e) = parse(&text) {
                out.push(e);
            }
        }
        if self.buf.len() > MAX_EVENT {
            return Err(format!("the model server sent more than {MAX_EVENT} bytes without an event boundary"));
        }
        Ok(out)
    }

    /// What is left when the stream ends (a last event without its blank line).
    pub fn finish(&mut self) -> Option<Event> {
        let text = String::from_utf8_lossy(&std::mem::take(&mut self.buf)).into_owned();
        parse(&text)
    }
}

fn boundary(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

fn parse(text: &str) -> Option<Event> {
    let mut name = String::new();
    let mut data: Vec<&str> = vec![];
    for line in text.lines() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if let Some(v) = line.strip_prefix("event:") {
            name = v.trim().to_string();
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    (!data.is_empty()).then(|| Event { name, data: data.join("\n") })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_anywhere() {
        let stream = "event: a\ndata: {\"x\":\"é\"}\n\n: comment\n\ndata: one\ndata: two\r\n\r\ndata: [DONE]\n\n";
        for cut in 0..stream.len() {
            let mut p = Parser::default();
            let mut got = p.push(&stream.as_bytes()[..cut]).unwrap();
            got.extend(p.push(&stream.as_bytes()[cut..]).unwrap());
            assert_eq!(
                got,
                vec![
                    Event { name: "a".into(), data: "{\"x\":\"é\"}".into() },
                    Event { name: "".into(), data: "one\ntwo".into() },
                    Event { name: "".into(), data: "[DONE]".into() },
                ],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn a_last_event_without_blank_line_is_kept() {
        let mut p = Parser::default();
        assert!(p.push(b"data: tail").unwrap().is_empty());
        assert_eq!(p.finish(), Some(Event { name: "".into(), data: "tail".into() }));
    }
}
