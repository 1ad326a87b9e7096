//! The HTTP/1.1 the client speaks to the API server: one connection per request (`Connection:
//! close`), over TLS with the cluster's CA (rustls, ring) or plain TCP for tests, synchronous
//! like the `Sandbox` trait. Bodies by `Content-Length`, chunked, or to the end; a response head
//! is capped at 64 KiB and a body at [`MAX_BODY`]. The same connection can be upgraded to a
//! WebSocket (`websocket.rs`) for exec.

use crate::ClientError;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

/// The largest response body read (a list of claims, a pod's status).
pub(crate) const MAX_BODY: usize = 16 << 20;
const MAX_HEAD: usize = 64 << 10;

/// Where the API server is and how to reach it.
#[derive(Clone)]
pub(crate) struct Endpoint {
    pub(crate) host: String,
    pub(crate) port: u16,
    /// `None`: plain HTTP (tests against a local fake only).
    pub(crate) tls: Option<Arc<rustls::ClientConfig>>,
    pub(crate) auth: Auth,
    pub(crate) connect_timeout: Duration,
    /// How long one read may block (a watch is re-established past it).
    pub(crate) read_timeout: Duration,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// How requests authenticate.
#[derive(Clone)]
pub(crate) enum Auth {
    /// Nothing (a client certificate in the TLS configuration, or a test).
    None,
    /// A bearer token.
    Token(String),
    /// A bearer token read from a file for every request (the kubelet rotates it).
    TokenFile(std::path::PathBuf),
}

impl Auth {
    pub(crate) fn header(&self) -> Result<Option<String>, ClientError> {
        match self {
            Auth::None => Ok(None),
            Auth::Token(token) => Ok(Some(format!("Bearer {token}"))),
            Auth::TokenFile(path) => {
                let token = std::fs::read_to_string(path).map_err(|source| {
                    ClientError::Credentials(format!("cannot read {}: {source}", path.display()))
                })?;
                Ok(Some(format!("Bearer {}", token.trim())))
            }
        }
    }
}

/// An open connection: TLS or plain, with a handle on the socket to time out reads and to shut
/// it down from another thread (which wakes a blocked reader).
pub(crate) struct Connection {
    socket: TcpStream,
    io: Box<dyn ReadWrite>,
}

pub(crate) trait ReadWrite: Read + Write + Send {}
impl<T: Read + Write + Send> ReadWrite for T {}

impl Connection {
    /// A handle that can shut the connection down (from any thread).
    pub(crate) fn shutter(&self) -> Result<Shutter, ClientError> {
        Ok(Shutter(self.socket.try_clone().map_err(ClientError::io)?))
    }

    pub(crate) fn set_read_timeout(&self, timeout: Option<Duration>) -> Result<(), ClientError> {
        self.socket
            .set_read_timeout(timeout)
            .map_err(ClientError::io)
    }
}

impl Read for Connection {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.io.read(buf)
    }
}

impl Write for Connection {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.io.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.io.flush()
    }
}

/// Shuts a connection down: a thread blocked reading it returns.
#[derive(Debug)]
pub(crate) struct Shutter(TcpStream);

impl Shutter {
    pub(crate) fn shut(&self) {
        let _ = self.0.shutdown(Shutdown::Both);
    }
}

/// One request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Request {
    pub(crate) method: &'static str,
    /// Path and query, percent-encoded.
    pub(crate) target: String,
    pub(crate) body: Option<(&'static str, Vec<u8>)>,
}

impl Request {
    pub(crate) fn get(target: String) -> Request {
        Request {
            method: "GET",
            target,
            body: None,
        }
    }

    pub(crate) fn json(method: &'static str, target: String, body: &serde_json::Value) -> Request {
        Request {
            method,
            target,
            body: Some(("application/json", body.to_string().into_bytes())),
        }
    }
}

/// A response head.
#[derive(Debug)]
pub(crate) struct Head {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
}

impl Head {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// A whole response.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
}

impl Response {
    pub(crate) fn json(&self) -> Result<serde_json::Value, ClientError> {
        serde_json::from_slice(&self.body)
            .map_err(|e| ClientError::Protocol(format!("the API server sent invalid JSON: {e}")))
    }
}

impl Endpoint {
    /// Opens a connection (TLS when configured).
    pub(crate) fn connect(&self) -> Result<Connection, ClientError> {
        let address = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| ClientError::Unreachable(format!("{}: {e}", self.host)))?
            .next()
            .ok_or_else(|| ClientError::Unreachable(format!("{}: no address", self.host)))?;
        let socket = TcpStream::connect_timeout(&address, self.connect_timeout)
            .map_err(|e| ClientError::Unreachable(format!("{}:{}: {e}", self.host, self.port)))?;
        socket.set_nodelay(true).map_err(ClientError::io)?;
        socket
            .set_read_timeout(Some(self.read_timeout))
            .map_err(ClientError::io)?;
        socket
            .set_write_timeout(Some(self.read_timeout))
            .map_err(ClientError::io)?;
        let io: Box<dyn ReadWrite> = match &self.tls {
            None => Box::new(socket.try_clone().map_err(ClientError::io)?),
            Some(tls) => {
                let name = rustls::pki_types::ServerName::try_from(self.host.clone())
                    .map_err(|e| ClientError::Credentials(format!("server name: {e}")))?;
                let session = rustls::ClientConnection::new(tls.clone(), name)
                    .map_err(|e| ClientError::Credentials(format!("TLS: {e}")))?;
                Box::new(rustls::StreamOwned::new(
                    session,
                    socket.try_clone().map_err(ClientError::io)?,
                ))
            }
        };
        Ok(Connection { socket, io })
    }

    /// Writes a request head (and body) on a connection.
    pub(crate) fn write_request(
        &self,
        connection: &mut Connection,
        request: &Request,
        extra_headers: &[(&str, String)],
    ) -> Result<(), ClientError> {
        let mut head = format!(
            "{} {} HTTP/1.1\r\nHost: {}:{}\r\nUser-Agent: warden\r\nAccept: application/json\r\n",
            request.method, request.target, self.host, self.port
        );
        if let Some(value) = self.auth.header()? {
            head.push_str(&format!("Authorization: {value}\r\n"));
        }
        for (name, value) in extra_headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        match &request.body {
            Some((content_type, body)) => {
                head.push_str(&format!(
                    "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
                    body.len()
                ));
            }
            None if request.method != "GET" => head.push_str("Content-Length: 0\r\n"),
            None => {}
        }
        head.push_str("\r\n");
        connection
            .write_all(head.as_bytes())
            .map_err(ClientError::io)?;
        if let Some((_, body)) = &request.body {
            connection.write_all(body).map_err(ClientError::io)?;
        }
        connection.flush().map_err(ClientError::io)
    }

    /// Sends one request and reads the whole response.
    pub(crate) fn send(&self, request: &Request) -> Result<Response, ClientError> {
        let mut connection = self.connect()?;
        self.write_request(
            &mut connection,
            request,
            &[("Connection", "close".to_string())],
        )?;
        let mut reader = BufReader::new(connection);
        let head = read_head(&mut reader)?;
        let mut body = Vec::new();
        body_reader(&head, reader)
            .take(MAX_BODY as u64 + 1)
            .read_to_end(&mut body)
            .map_err(ClientError::io)?;
        if body.len() > MAX_BODY {
            return Err(ClientError::Protocol(format!(
                "a response body passed {MAX_BODY} bytes"
            )));
        }
        Ok(Response {
            status: head.status,
            body,
        })
    }

    /// Sends a request whose response streams (a watch): its head, and a reader of its body.
    pub(crate) fn open_stream(
        &self,
        request: &Request,
    ) -> Result<(Head, Box<dyn BufRead + Send>, Shutter), ClientError> {
        let mut connection = self.connect()?;
        let shutter = connection.shutter()?;
        self.write_request(
            &mut connection,
            request,
            &[("Connection", "close".to_string())],
        )?;
        let mut reader = BufReader::new(connection);
        let head = read_head(&mut reader)?;
        let body = BufReader::new(body_reader(&head, reader));
        Ok((head, Box::new(body), shutter))
    }
}

/// Reads a response head: status line and headers.
pub(crate) fn read_head<R: BufRead>(reader: &mut R) -> Result<Head, ClientError> {
    let mut read = 0usize;
    let mut line = String::new();
    let mut next_line = |line: &mut String| -> Result<(), ClientError> {
        line.clear();
        let n = reader
            .by_ref()
            .take((MAX_HEAD - read) as u64 + 1)
            .read_line(line)
            .map_err(ClientError::io)?;
        read += n;
        if n == 0 {
            return Err(ClientError::Protocol(
                "the connection closed before a response".into(),
            ));
        }
        if read > MAX_HEAD {
            return Err(ClientError::Protocol(format!(
                "a response head passed {MAX_HEAD} bytes"
            )));
        }
        Ok(())
    };
    next_line(&mut line)?;
    let status = line
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| line.strip_prefix("HTTP/1.0 "))
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| ClientError::Protocol(format!("not an HTTP status line: {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        next_line(&mut line)?;
        let trimmed = line.trim_end_matches(['\r', '\n']);
        if trimmed.is_empty() {
            break;
        }
        if let Some((name, value)) = trimmed.split_once(':') {
            headers.push((name.trim().to_string(), value.trim().to_string()));
        }
    }
    Ok(Head { status, headers })
}

/// The body of a response as its head describes it.
fn body_reader<R: BufRead + Send + 'static>(head: &Head, reader: R) -> Box<dyn Read + Send> {
    let chunked = head
        .header("Transfer-Encoding")
        .is_some_and(|value| value.to_ascii_lowercase().contains("chunked"));
    if chunked {
        return Box::new(Chunked {
            inner: reader,
            left: 0,
            done: false,
        });
    }
    match head
        .header("Content-Length")
        .and_then(|value| value.parse::<u64>().ok())
    {
        Some(length) => Box::new(reader.take(length)),
        None => Box::new(reader),
    }
}

/// A chunked transfer-coding decoder.
struct Chunked<R> {
    inner: R,
    left: usize,
    done: bool,
}

impl<R: BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            let mut line = String::new();
            self.inner.by_ref().take(1024).read_line(&mut line)?;
            let size = line.trim().split(';').next().unwrap_or("");
            let size = usize::from_str_radix(size, 16).map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("bad chunk size {line:?}"),
                )
            })?;
            if size == 0 {
                self.done = true;
                return Ok(0);
            }
            self.left = size;
        }
        let want = buf.len().min(self.left);
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        self.left -= n;
        if self.left == 0 {
            let mut crlf = [0u8; 2];
            self.inner.read_exact(&mut crlf)?;
        }
        Ok(n)
    }
}

/// Percent-encodes a query value (RFC 3986 unreserved characters stay).
pub(crate) fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bodies_are_decoded() {
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n7;x=y\r\n, world\r\n0\r\n\r\n";
        let mut reader = BufReader::new(&raw[..]);
        let head = read_head(&mut reader).unwrap();
        assert_eq!(head.status, 200);
        let mut body = String::new();
        struct Owned(Vec<u8>, usize);
        impl Read for Owned {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = buf.len().min(self.0.len() - self.1);
                buf[..n].copy_from_slice(&self.0[self.1..self.1 + n]);
                self.1 += n;
                Ok(n)
            }
        }
        let rest = reader.buffer().to_vec();
        body_reader(&head, BufReader::new(Owned(rest, 0)))
            .read_to_string(&mut body)
            .unwrap();
        assert_eq!(body, "hello, world");
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(encode("metadata.name=a b"), "metadata.name%3Da%20b");
        assert_eq!(
            encode("app.kubernetes.io/managed-by=warden"),
            "app.kubernetes.io%2Fmanaged-by%3Dwarden"
        );
    }
}
