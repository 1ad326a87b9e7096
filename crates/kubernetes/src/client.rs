//! The API calls the backend makes, against the published REST API: `SandboxClaim`s (create,
//! get, watch one by name, extend by merge patch, delete, list by label), the `Sandbox` a claim
//! is bound to, and exec into its pod over WebSocket (`v5.channel.k8s.io`, else
//! `v4.channel.k8s.io`). Every request is counted ([`Client::requests`]).

use crate::http::{encode, Endpoint, Request, Shutter};
use crate::render::{CONTAINER, EXTENSIONS_GROUP, SANDBOX_GROUP, VERSION};
use crate::websocket::{self, FrameReader, Message, Poll};
use crate::ClientError;
use serde_json::{json, Value};
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

/// The exec sub-protocols offered, newest first (v5 can half-close stdin).
pub(crate) const EXEC_PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

/// A client of one namespace.
#[derive(Debug)]
pub(crate) struct Client {
    endpoint: Endpoint,
    namespace: String,
    requests: AtomicU64,
}

/// What a claim is made with.
#[derive(Debug, Clone)]
pub(crate) struct NewClaim<'a> {
    pub(crate) name: &'a str,
    pub(crate) warm_pool: &'a str,
    pub(crate) owner: &'a str,
    /// The task the sandbox serves, when it is a valid label value.
    pub(crate) task: Option<&'a str>,
    pub(crate) shutdown_time: &'a str,
}

impl Client {
    pub(crate) fn new(endpoint: Endpoint, namespace: &str) -> Client {
        Client {
            endpoint,
            namespace: namespace.to_string(),
            requests: AtomicU64::new(0),
        }
    }

    /// Requests sent so far (each exec counts one).
    pub(crate) fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    fn claims(&self) -> String {
        format!(
            "/apis/{EXTENSIONS_GROUP}/{VERSION}/namespaces/{}/sandboxclaims",
            self.namespace
        )
    }

    fn send(&self, request: Request) -> Result<crate::http::Response, ClientError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.endpoint.send(&request)
    }

    /// The body of a claim: labels saying who made it and for which task, the warm pool, an
    /// expiry that deletes it. No `env` (it would force a cold start) and nothing secret.
    pub(crate) fn claim_body(&self, claim: &NewClaim<'_>) -> Value {
        let mut body = json!({
            "apiVersion": format!("{EXTENSIONS_GROUP}/{VERSION}"),
            "kind": "SandboxClaim",
            "metadata": {
                "name": claim.name,
                "namespace": self.namespace,
                "labels": {
                    crate::names::MANAGED_BY.0: crate::names::MANAGED_BY.1,
                    crate::names::OWNER_LABEL: claim.owner,
                },
            },
            "spec": {
                "warmPoolRef": {"name": claim.warm_pool},
                "lifecycle": {"shutdownTime": claim.shutdown_time, "shutdownPolicy": "Delete"},
            },
        });
        if let Some(task) = claim.task.filter(|task| crate::names::is_label_value(task)) {
            body["metadata"]["labels"][crate::names::TASK_LABEL] = json!(task);
        }
        body
    }

    pub(crate) fn create_claim(&self, claim: &NewClaim<'_>) -> Result<Value, ClientError> {
        let response = self.send(Request::json(
            "POST",
            self.claims(),
            &self.claim_body(claim),
        ))?;
        expect(&response, &[200, 201, 202], "create the claim")?;
        response.json()
    }

    pub(crate) fn get_claim(&self, name: &str) -> Result<Option<Value>, ClientError> {
        let response = self.send(Request::get(format!("{}/{name}", self.claims())))?;
        if response.status == 404 {
            return Ok(None);
        }
        expect(&response, &[200], "read the claim")?;
        response.json().map(Some)
    }

    /// Watches one claim from `resource_version` on; the server ends the watch after
    /// `timeout_secs`.
    pub(crate) fn watch_claim(
        &self,
        name: &str,
        resource_version: &str,
        timeout_secs: u64,
    ) -> Result<Watch, ClientError> {
        let target = format!(
            "{}?watch=true&fieldSelector={}&resourceVersion={}&allowWatchBookmarks=true&timeoutSeconds={timeout_secs}",
            self.claims(),
            encode(&format!("metadata.name={name}")),
            encode(resource_version),
        );
        self.requests.fetch_add(1, Ordering::Relaxed);
        let (head, body, shutter) = self.endpoint.open_stream(&Request::get(target))?;
        if head.status != 200 {
            return Err(ClientError::Status {
                status: head.status,
                message: "watch the claim".into(),
            });
        }
        Ok(Watch { body, shutter })
    }

    pub(crate) fn get_sandbox(&self, name: &str) -> Result<Option<Value>, ClientError> {
        let target = format!(
            "/apis/{SANDBOX_GROUP}/{VERSION}/namespaces/{}/sandboxes/{name}",
            self.namespace
        );
        let response = self.send(Request::get(target))?;
        if response.status == 404 {
            return Ok(None);
        }
        expect(&response, &[200], "read the sandbox")?;
        response.json().map(Some)
    }

    /// Pushes a claim's expiry to `shutdown_time` (a JSON merge patch of
    /// `spec.lifecycle.shutdownTime`). `false`: the claim is gone.
    pub(crate) fn extend_claim(
        &self,
        name: &str,
        shutdown_time: &str,
    ) -> Result<bool, ClientError> {
        let mut request = Request::json(
            "PATCH",
            format!("{}/{name}", self.claims()),
            &json!({"spec": {"lifecycle": {"shutdownTime": shutdown_time}}}),
        );
        if let Some((content_type, _)) = &mut request.body {
            *content_type = "application/merge-patch+json";
        }
        let response = self.send(request)?;
        if response.status == 404 {
            return Ok(false);
        }
        expect(&response, &[200], "extend the claim")?;
        Ok(true)
    }

    /// Deletes a claim (and, through its owner references, its sandbox and pod). `false`: it
    /// was gone already.
    pub(crate) fn delete_claim(&self, name: &str) -> Result<bool, ClientError> {
        let response = self.send(Request::json(
            "DELETE",
            format!("{}/{name}", self.claims()),
            &json!({"propagationPolicy": "Background"}),
        ))?;
        if response.status == 404 {
            return Ok(false);
        }
        expect(&response, &[200, 202], "delete the claim")?;
        Ok(true)
    }

    /// The claims carrying every label of `selector` (`key=value,...`).
    pub(crate) fn list_claims(&self, selector: &str) -> Result<Vec<Value>, ClientError> {
        let target = format!("{}?labelSelector={}", self.claims(), encode(selector));
        let response = self.send(Request::get(target))?;
        expect(&response, &[200], "list claims")?;
        let list = response.json()?;
        Ok(list["items"].as_array().cloned().unwrap_or_default())
    }

    /// Runs `argv` in the pod's sandbox container over WebSocket exec and streams it through
    /// `io`; returns how it ended.
    pub(crate) fn exec(
        &self,
        pod: &str,
        argv: &[String],
        io: &mut ExecIo<'_>,
    ) -> Result<ExecEnd, ClientError> {
        let mut target = format!(
            "/api/v1/namespaces/{}/pods/{pod}/exec?container={CONTAINER}&stdin={}&stdout=true&stderr=true",
            self.namespace,
            io.stdin.is_some()
        );
        for arg in argv {
            target.push_str("&command=");
            target.push_str(&encode(arg));
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        let (mut connection, protocol) =
            websocket::connect(&self.endpoint, &Request::get(target), &EXEC_PROTOCOLS)?;
        let v5 = protocol.as_deref() == Some(EXEC_PROTOCOLS[0]);
        if !protocol
            .as_deref()
            .is_some_and(|p| EXEC_PROTOCOLS.contains(&p))
        {
            return Err(ClientError::Protocol(format!(
                "the API server chose exec protocol {protocol:?}; Warden speaks {}",
                EXEC_PROTOCOLS.join(" and ")
            )));
        }
        // While stdin flows, reads wait briefly so the next chunk goes out soon.
        connection.set_read_timeout(Some(Duration::from_millis(if io.stdin.is_some() {
            2
        } else {
            20
        })))?;
        let shutter = connection.shutter()?;
        let mut reader = FrameReader::default();
        let mut stdin_open = io.stdin.is_some();
        let mut stopped = false;
        let end = loop {
            if Instant::now() >= io.deadline {
                break ExecEnd::DeadlinePassed;
            }
            if !stopped && (io.stop)() {
                stopped = true;
                (io.on_stop)();
            }
            // Stdin first, a bounded amount per turn so output keeps flowing.
            if stdin_open {
                if let Some(stdin) = &io.stdin {
                    let mut sent = 0usize;
                    while sent < 4 << 20 {
                        match stdin.try_recv() {
                            Ok(chunk) => {
                                sent += chunk.len();
                                let mut message = Vec::with_capacity(chunk.len() + 1);
                                message.push(0);
                                message.extend_from_slice(&chunk);
                                websocket::write_message(&mut connection, 0x2, &message, true)
                                    .map_err(ClientError::io)?;
                            }
                            Err(TryRecvError::Empty) => break,
                            Err(TryRecvError::Disconnected) => {
                                stdin_open = false;
                                if v5 {
                                    // v5's half-close of stdin: [255, channel].
                                    websocket::write_message(&mut connection, 0x2, &[255, 0], true)
                                        .map_err(ClientError::io)?;
                                }
                                // Nothing more to send: wait for output longer per read.
                                connection.set_read_timeout(Some(Duration::from_millis(20)))?;
                                break;
                            }
                        }
                    }
                }
            }
            let mut pongs = Vec::new();
            let polled = reader.poll(&mut connection, &mut |payload| {
                pongs.push(payload.to_vec());
                Ok(())
            });
            for payload in pongs {
                websocket::write_message(&mut connection, 0xA, &payload, true)
                    .map_err(ClientError::io)?;
            }
            match polled {
                Ok(Poll::Nothing) => {}
                Ok(Poll::Eof) | Ok(Poll::Message(Message::Close)) => {
                    break ExecEnd::Dropped(
                        "the exec stream closed before the command's status".into(),
                    )
                }
                Ok(Poll::Message(Message::Binary(data) | Message::Text(data))) => {
                    match data.split_first() {
                        Some((&1, rest)) => (io.on_output)(1, rest),
                        Some((&2, rest)) => (io.on_output)(2, rest),
                        Some((&3, rest)) => break status_end(rest),
                        _ => {}
                    }
                }
                Err(ClientError::Io(error)) => break ExecEnd::Dropped(error.to_string()),
                Err(other) => return Err(other),
            }
        };
        let _ = websocket::write_message(&mut connection, 0x8, &[], true);
        shutter.shut();
        Ok(end)
    }
}

/// How exec streams: stdin chunks (the channel's end is stdin's end), output by channel
/// (1 stdout, 2 stderr), when to give up, and how to ask the command to stop.
pub(crate) struct ExecIo<'a> {
    pub(crate) stdin: Option<Receiver<Vec<u8>>>,
    pub(crate) on_output: &'a mut dyn FnMut(u8, &[u8]),
    pub(crate) deadline: Instant,
    /// Polled between reads; when it first returns true, `on_stop` runs once.
    pub(crate) stop: &'a dyn Fn() -> bool,
    pub(crate) on_stop: &'a mut dyn FnMut(),
}

/// How an exec ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ExecEnd {
    /// The command's exit status.
    Exited(i32),
    /// The server refused or failed the exec (no exit status), with its message.
    Failed(String),
    /// The stream ended without a status (the pod or the connection went away).
    Dropped(String),
    /// The deadline passed first.
    DeadlinePassed,
}

fn status_end(body: &[u8]) -> ExecEnd {
    let Ok(status) = serde_json::from_slice::<Value>(body) else {
        return ExecEnd::Failed(format!(
            "an unreadable exec status: {}",
            String::from_utf8_lossy(body)
        ));
    };
    if status["status"] == "Success" {
        return ExecEnd::Exited(0);
    }
    if status["reason"] == "NonZeroExitCode" {
        if let Some(code) = status["details"]["causes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|cause| cause["reason"] == "ExitCode")
            .and_then(|cause| cause["message"].as_str())
            .and_then(|code| code.parse::<i32>().ok())
        {
            return ExecEnd::Exited(code);
        }
    }
    ExecEnd::Failed(
        status["message"]
            .as_str()
            .unwrap_or("the exec failed without a message")
            .to_string(),
    )
}

fn expect(
    response: &crate::http::Response,
    statuses: &[u16],
    what: &str,
) -> Result<(), ClientError> {
    if statuses.contains(&response.status) {
        return Ok(());
    }
    let message = serde_json::from_slice::<Value>(&response.body)
        .ok()
        .and_then(|status| status["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| {
            String::from_utf8_lossy(&response.body)
                .chars()
                .take(300)
                .collect()
        });
    Err(ClientError::Status {
        status: response.status,
        message: format!("{what}: {message}"),
    })
}

/// A watch's events, one JSON object a line.
pub(crate) struct Watch {
    body: Box<dyn BufRead + Send>,
    shutter: Shutter,
}

impl Watch {
    /// The next event (`type`, `object`); `None` when the watch ended or dropped (re-read the
    /// object and watch again).
    pub(crate) fn next_event(&mut self) -> Option<(String, Value)> {
        let mut line = String::new();
        loop {
            line.clear();
            match self.body.read_line(&mut line) {
                Ok(0) | Err(_) => return None,
                Ok(_) if line.trim().is_empty() => continue,
                Ok(_) => {}
            }
            let event: Value = serde_json::from_str(line.trim()).ok()?;
            let kind = event["type"].as_str()?.to_string();
            return Some((kind, event["object"].clone()));
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.shutter.shut();
    }
}

/// Writes into a channel in chunks (an exec's stdin).
pub(crate) struct ChannelWriter(pub(crate) std::sync::mpsc::SyncSender<Vec<u8>>);

impl Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = buf.len().min(64 << 10);
        self.0
            .send(buf[..n].to_vec())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))?;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_statuses() {
        assert_eq!(
            status_end(br#"{"metadata":{},"status":"Success"}"#),
            ExecEnd::Exited(0)
        );
        assert_eq!(
            status_end(
                br#"{"status":"Failure","reason":"NonZeroExitCode","message":"x","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#
            ),
            ExecEnd::Exited(3)
        );
        assert_eq!(
            status_end(
                br#"{"status":"Failure","reason":"InternalError","message":"container not found"}"#
            ),
            ExecEnd::Failed("container not found".into())
        );
    }
}

/// The exact requests the client sends (method, path, query, body), against a mock HTTP service
/// that records them and answers from a script.
#[cfg(test)]
mod exact_requests {
    use super::*;
    use crate::http::Auth;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::sync::{Arc, Mutex};

    #[derive(Debug, Clone, PartialEq)]
    struct Seen {
        method: String,
        target: String,
        content_type: Option<String>,
        authorization: Option<String>,
        body: Option<Value>,
    }

    /// Answers each connection with the next scripted `(status, body)`.
    fn mock(script: Vec<(u16, &'static str)>) -> (Client, Arc<Mutex<Vec<Seen>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        std::thread::spawn(move || {
            for (status, body) in script {
                let (socket, _) = listener.accept().unwrap();
                let mut reader = BufReader::new(socket.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let mut parts = line.split_whitespace();
                let method = parts.next().unwrap().to_string();
                let target = parts.next().unwrap().to_string();
                let mut headers = Vec::new();
                loop {
                    line.clear();
                    reader.read_line(&mut line).unwrap();
                    if line.trim().is_empty() {
                        break;
                    }
                    let (name, value) = line.trim().split_once(':').unwrap();
                    headers.push((name.to_ascii_lowercase(), value.trim().to_string()));
                }
                let header = |name: &str| {
                    headers
                        .iter()
                        .find(|(key, _)| key == name)
                        .map(|(_, value)| value.clone())
                };
                let length: usize = header("content-length").map_or(0, |v| v.parse().unwrap());
                let mut raw = vec![0u8; length];
                reader.read_exact(&mut raw).unwrap();
                record.lock().unwrap().push(Seen {
                    method,
                    target,
                    content_type: header("content-type"),
                    authorization: header("authorization"),
                    body: (length > 0).then(|| serde_json::from_slice(&raw).unwrap()),
                });
                let mut socket = socket;
                write!(
                    socket,
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .unwrap();
            }
        });
        let endpoint = Endpoint {
            host: "127.0.0.1".into(),
            port,
            tls: None,
            auth: Auth::Token("t0ken".into()),
            connect_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(5),
        };
        (Client::new(endpoint, "sandboxes"), seen)
    }

    const CLAIMS: &str =
        "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/sandboxes/sandboxclaims";

    #[test]
    fn a_claim_is_created_on_the_warm_pool_with_an_expiry_and_no_env() {
        let (client, seen) = mock(vec![(201, r#"{"metadata":{"resourceVersion":"7"}}"#)]);
        let created = client
            .create_claim(&NewClaim {
                name: "warden-abc",
                warm_pool: "pool",
                owner: "worker-1",
                task: Some("tsk_01abc"),
                shutdown_time: "2026-01-02T03:04:05Z",
            })
            .unwrap();
        assert_eq!(created["metadata"]["resourceVersion"], "7");
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            vec![Seen {
                method: "POST".into(),
                target: CLAIMS.into(),
                content_type: Some("application/json".into()),
                authorization: Some("Bearer t0ken".into()),
                body: Some(json!({
                    "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                    "kind": "SandboxClaim",
                    "metadata": {
                        "name": "warden-abc",
                        "namespace": "sandboxes",
                        "labels": {
                            "app.kubernetes.io/managed-by": "warden",
                            "warden.dev/owner": "worker-1",
                            "warden.dev/task": "tsk_01abc",
                        },
                    },
                    "spec": {
                        "warmPoolRef": {"name": "pool"},
                        "lifecycle": {"shutdownTime": "2026-01-02T03:04:05Z", "shutdownPolicy": "Delete"},
                    },
                })),
            }]
        );
        assert_eq!(client.requests(), 1);
    }

    #[test]
    fn a_task_that_is_no_label_value_is_left_off_the_claim() {
        let (client, _) = mock(vec![]);
        let claim = |task| {
            client.claim_body(&NewClaim {
                name: "warden-abc",
                warm_pool: "pool",
                owner: "worker-1",
                task,
                shutdown_time: "2026-01-02T03:04:05Z",
            })
        };
        let labels = |body: &Value| body["metadata"]["labels"].clone();
        assert_eq!(labels(&claim(Some("tsk_1")))["warden.dev/task"], "tsk_1");
        for bad in [None, Some("a/b"), Some("-x"), Some(&*"t".repeat(64))] {
            let body = claim(bad);
            assert!(
                labels(&body).get("warden.dev/task").is_none(),
                "{bad:?}: {body}"
            );
            assert_eq!(labels(&body)["warden.dev/owner"], "worker-1");
        }
    }

    #[test]
    fn reads_extends_lists_and_deletes() {
        let (client, seen) = mock(vec![
            (200, r#"{"metadata":{"name":"warden-abc"}}"#),
            (404, r#"{"kind":"Status","message":"not found"}"#),
            (200, r#"{"metadata":{"name":"sb"}}"#),
            (200, "{}"),
            (
                200,
                r#"{"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}"#,
            ),
            (200, "{}"),
            (404, "{}"),
            (
                403,
                r#"{"kind":"Status","message":"sandboxclaims is forbidden"}"#,
            ),
        ]);
        assert!(client.get_claim("warden-abc").unwrap().is_some());
        assert!(client.get_claim("gone").unwrap().is_none());
        assert!(client.get_sandbox("sb").unwrap().is_some());
        assert!(client
            .extend_claim("warden-abc", "2026-01-02T03:14:05Z")
            .unwrap());
        assert_eq!(
            client
                .list_claims("app.kubernetes.io/managed-by=warden,warden.dev/owner=w1")
                .unwrap()
                .len(),
            2
        );
        assert!(client.delete_claim("warden-abc").unwrap());
        assert!(!client.delete_claim("warden-abc").unwrap());
        let error = client.get_claim("x").unwrap_err().to_string();
        assert!(
            error.contains("403") && error.contains("forbidden"),
            "{error}"
        );
        let seen = seen.lock().unwrap().clone();
        let lines: Vec<(String, String, Option<String>, Option<Value>)> = seen
            .into_iter()
            .map(|s| (s.method, s.target, s.content_type, s.body))
            .collect();
        assert_eq!(
            lines,
            vec![
                ("GET".into(), format!("{CLAIMS}/warden-abc"), None, None),
                ("GET".into(), format!("{CLAIMS}/gone"), None, None),
                (
                    "GET".into(),
                    "/apis/agents.x-k8s.io/v1beta1/namespaces/sandboxes/sandboxes/sb".into(),
                    None,
                    None
                ),
                (
                    "PATCH".into(),
                    format!("{CLAIMS}/warden-abc"),
                    Some("application/merge-patch+json".into()),
                    Some(json!({"spec": {"lifecycle": {"shutdownTime": "2026-01-02T03:14:05Z"}}}))
                ),
                (
                    "GET".into(),
                    format!("{CLAIMS}?labelSelector=app.kubernetes.io%2Fmanaged-by%3Dwarden%2Cwarden.dev%2Fowner%3Dw1"),
                    None,
                    None
                ),
                (
                    "DELETE".into(),
                    format!("{CLAIMS}/warden-abc"),
                    Some("application/json".into()),
                    Some(json!({"propagationPolicy": "Background"}))
                ),
                (
                    "DELETE".into(),
                    format!("{CLAIMS}/warden-abc"),
                    Some("application/json".into()),
                    Some(json!({"propagationPolicy": "Background"}))
                ),
                ("GET".into(), format!("{CLAIMS}/x"), None, None),
            ]
        );
        assert_eq!(client.requests(), 8);
    }

    #[test]
    fn a_watch_names_its_claim_and_resource_version_and_reads_events_as_they_come() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (socket, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(socket.try_clone().unwrap());
            let mut request_line = String::new();
            reader.read_line(&mut request_line).unwrap();
            let mut socket = socket;
            socket
                .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                .unwrap();
            for event in [
                r#"{"type":"ADDED","object":{"metadata":{"name":"c"}}}"#,
                r#"{"type":"MODIFIED","object":{"status":{"conditions":[{"type":"Ready","status":"True"}]}}}"#,
            ] {
                let line = format!("{event}\n");
                write!(socket, "{:x}\r\n{line}\r\n", line.len()).unwrap();
                socket.flush().unwrap();
            }
            // The watch drops without its final chunk.
            drop(socket);
            request_line
        });
        let endpoint = Endpoint {
            host: "127.0.0.1".into(),
            port,
            tls: None,
            auth: Auth::None,
            connect_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(5),
        };
        let client = Client::new(endpoint, "sandboxes");
        let mut watch = client.watch_claim("warden-abc", "41", 30).unwrap();
        assert_eq!(watch.next_event().unwrap().0, "ADDED");
        let (kind, object) = watch.next_event().unwrap();
        assert_eq!(kind, "MODIFIED");
        assert_eq!(object["status"]["conditions"][0]["status"], "True");
        assert!(watch.next_event().is_none(), "a dropped watch ends");
        let request_line = server.join().unwrap();
        assert_eq!(
            request_line.trim(),
            format!(
                "GET {CLAIMS}?watch=true&fieldSelector=metadata.name%3Dwarden-abc&resourceVersion=41&allowWatchBookmarks=true&timeoutSeconds=30 HTTP/1.1"
            )
        );
    }
}
