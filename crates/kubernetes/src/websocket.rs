//! The WebSocket framing exec speaks (RFC 6455, binary messages only): the client's opening
//! handshake with `Sec-WebSocket-Accept` checked, masked client frames, and a frame reader that
//! keeps partial frames across read timeouts, so one thread can poll a connection. The fake API
//! server uses the same reader and writes unmasked server frames.

use crate::http::{Connection, Endpoint, Request};
use crate::ClientError;
use base64::Engine as _;
use sha1::Digest as _;
use std::io::{Read, Write};

/// The GUID of RFC 6455 §1.3.
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// The largest message accepted (exec output arrives in small messages).
const MAX_MESSAGE: usize = 8 << 20;

/// `Sec-WebSocket-Accept` for a key.
pub(crate) fn accept_key(key: &str) -> String {
    let digest = sha1::Sha1::digest(format!("{key}{GUID}").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(digest)
}

/// A message, as exec uses them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Message {
    Binary(Vec<u8>),
    Text(Vec<u8>),
    Close,
}

/// Opens a WebSocket on `request` (a GET) offering `protocols`; returns the connection and the
/// protocol the server chose.
pub(crate) fn connect(
    endpoint: &Endpoint,
    request: &Request,
    protocols: &[&str],
) -> Result<(Connection, Option<String>), ClientError> {
    let mut random = [0u8; 16];
    getrandom::fill(&mut random).map_err(|e| ClientError::Protocol(format!("randomness: {e}")))?;
    let key = base64::engine::general_purpose::STANDARD.encode(random);
    let mut connection = endpoint.connect()?;
    endpoint.write_request(
        &mut connection,
        request,
        &[
            ("Connection", "Upgrade".into()),
            ("Upgrade", "websocket".into()),
            ("Sec-WebSocket-Version", "13".into()),
            ("Sec-WebSocket-Key", key.clone()),
            ("Sec-WebSocket-Protocol", protocols.join(", ")),
        ],
    )?;
    // Read the head byte by byte: what follows it belongs to the WebSocket.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 64 << 10 {
            return Err(ClientError::Protocol(
                "an upgrade response head is too long".into(),
            ));
        }
        match connection.read(&mut byte) {
            Ok(0) => {
                return Err(ClientError::Protocol(
                    "the connection closed during the upgrade".into(),
                ))
            }
            Ok(_) => head.push(byte[0]),
            Err(e) => return Err(ClientError::io(e)),
        }
    }
    let parsed = crate::http::read_head(&mut std::io::BufReader::new(&head[..]))?;
    if parsed.status != 101 {
        return Err(ClientError::Status {
            status: parsed.status,
            message: format!("the exec upgrade was refused ({})", parsed.status),
        });
    }
    if parsed.header("Sec-WebSocket-Accept") != Some(accept_key(&key).as_str()) {
        return Err(ClientError::Protocol("wrong Sec-WebSocket-Accept".into()));
    }
    let chosen = parsed.header("Sec-WebSocket-Protocol").map(str::to_string);
    Ok((connection, chosen))
}

/// Writes one message: masked when `mask` (a client), unmasked otherwise (a server).
pub(crate) fn write_message(
    out: &mut dyn Write,
    opcode: u8,
    payload: &[u8],
    mask: bool,
) -> std::io::Result<()> {
    let mut frame = Vec::with_capacity(payload.len() + 14);
    frame.push(0x80 | opcode);
    let mask_bit = if mask { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => frame.push(mask_bit | n as u8),
        n if n <= usize::from(u16::MAX) => {
            frame.push(mask_bit | 126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            frame.push(mask_bit | 127);
            frame.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    if mask {
        let mut key = [0u8; 4];
        getrandom::fill(&mut key).map_err(|e| std::io::Error::other(e.to_string()))?;
        frame.extend_from_slice(&key);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    } else {
        frame.extend_from_slice(payload);
    }
    out.write_all(&frame)?;
    out.flush()
}

/// Reads frames into messages, keeping partial ones across read timeouts.
#[derive(Default)]
pub(crate) struct FrameReader {
    buffer: Vec<u8>,
    /// A fragmented message being assembled: its opcode and data.
    partial: Option<(u8, Vec<u8>)>,
}

/// What one poll of a connection gave.
pub(crate) enum Poll {
    Message(Message),
    /// Nothing complete yet (the read timed out).
    Nothing,
    /// The peer closed the connection without a close frame.
    Eof,
}

impl FrameReader {
    /// Returns a complete message if one is buffered or arrives before the read times out.
    /// Pings are answered through `pong` (may be `None` on the server side of a test).
    pub(crate) fn poll(
        &mut self,
        input: &mut dyn Read,
        pong: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<Poll, ClientError> {
        loop {
            if let Some(message) = self.parse(pong)? {
                return Ok(Poll::Message(message));
            }
            let mut chunk = [0u8; 64 << 10];
            match input.read(&mut chunk) {
                Ok(0) => return Ok(Poll::Eof),
                Ok(n) => self.buffer.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(Poll::Nothing)
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ClientError::io(e)),
            }
        }
    }

    fn parse(
        &mut self,
        pong: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<Option<Message>, ClientError> {
        loop {
            let buf = &self.buffer;
            if buf.len() < 2 {
                return Ok(None);
            }
            let fin = buf[0] & 0x80 != 0;
            let opcode = buf[0] & 0x0f;
            let masked = buf[1] & 0x80 != 0;
            let (length, mut at) = match buf[1] & 0x7f {
                126 if buf.len() >= 4 => (usize::from(u16::from_be_bytes([buf[2], buf[3]])), 4),
                127 if buf.len() >= 10 => {
                    let mut bytes = [0u8; 8];
                    bytes.copy_from_slice(&buf[2..10]);
                    (
                        usize::try_from(u64::from_be_bytes(bytes)).unwrap_or(usize::MAX),
                        10,
                    )
                }
                126 | 127 => return Ok(None),
                n => (usize::from(n), 2),
            };
            if length > MAX_MESSAGE {
                return Err(ClientError::Protocol(format!(
                    "a WebSocket frame of {length} bytes passed {MAX_MESSAGE}"
                )));
            }
            let key = if masked {
                if buf.len() < at + 4 {
                    return Ok(None);
                }
                let key = [buf[at], buf[at + 1], buf[at + 2], buf[at + 3]];
                at += 4;
                Some(key)
            } else {
                None
            };
            if buf.len() < at + length {
                return Ok(None);
            }
            let mut payload: Vec<u8> = buf[at..at + length].to_vec();
            if let Some(key) = key {
                for (i, byte) in payload.iter_mut().enumerate() {
                    *byte ^= key[i % 4];
                }
            }
            self.buffer.drain(..at + length);
            match opcode {
                0x8 => return Ok(Some(Message::Close)),
                0x9 => {
                    pong(&payload).map_err(ClientError::io)?;
                    continue;
                }
                0xA => continue,
                0x0 => {
                    let Some((first, mut data)) = self.partial.take() else {
                        return Err(ClientError::Protocol(
                            "a continuation frame without a start".into(),
                        ));
                    };
                    data.extend_from_slice(&payload);
                    if data.len() > MAX_MESSAGE {
                        return Err(ClientError::Protocol(
                            "a WebSocket message is too large".into(),
                        ));
                    }
                    if fin {
                        return Ok(Some(message(first, data)));
                    }
                    self.partial = Some((first, data));
                }
                0x1 | 0x2 => {
                    if fin {
                        return Ok(Some(message(opcode, payload)));
                    }
                    self.partial = Some((opcode, payload));
                }
                other => {
                    return Err(ClientError::Protocol(format!(
                        "unknown WebSocket opcode {other}"
                    )))
                }
            }
        }
    }
}

fn message(opcode: u8, data: Vec<u8>) -> Message {
    if opcode == 0x1 {
        Message::Text(data)
    } else {
        Message::Binary(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rfc_example_key_is_accepted() {
        // RFC 6455 §1.3.
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn frames_round_trip_masked_and_across_partial_reads() {
        let mut wire = Vec::new();
        for payload in [vec![1u8, b'h', b'i'], vec![2u8; 300], vec![7u8; 70_000]] {
            write_message(&mut wire, 0x2, &payload, true).unwrap();
        }
        write_message(&mut wire, 0x8, &[], false).unwrap();
        // Delivered three bytes at a time, with a timeout between each.
        struct Trickle(Vec<u8>, usize, bool);
        impl Read for Trickle {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                self.2 = !self.2;
                if self.2 {
                    return Err(std::io::ErrorKind::WouldBlock.into());
                }
                let n = buf.len().min(3).min(self.0.len() - self.1);
                buf[..n].copy_from_slice(&self.0[self.1..self.1 + n]);
                self.1 += n;
                Ok(n)
            }
        }
        let mut input = Trickle(wire, 0, false);
        let mut reader = FrameReader::default();
        let mut got = Vec::new();
        loop {
            match reader.poll(&mut input, &mut |_| Ok(())).unwrap() {
                Poll::Message(Message::Close) => break,
                Poll::Message(Message::Binary(data)) => got.push(data.len()),
                Poll::Message(Message::Text(_)) => panic!("text"),
                Poll::Nothing => {}
                Poll::Eof => panic!("eof"),
            }
        }
        assert_eq!(got, vec![3, 300, 70_000]);
    }
}
