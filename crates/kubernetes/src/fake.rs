//! A stateful in-memory fake of the API server, for tests (feature `fake`): the calls the
//! backend makes — claims (create, get, watch, merge patch, delete, list by label), sandboxes,
//! exec over WebSocket (v5/v4) — over plain HTTP on 127.0.0.1, with a bearer token.
//!
//! It behaves like agent-sandbox's controllers as far as Warden can see: a claim on the warm
//! pool is bound after a delay to a ready sandbox and pod; a claim past its
//! `lifecycle.shutdownTime` is deleted with its pod; deleting a claim deletes its pod. A pod is
//! a writable view of another sandbox backend (the caller's choice, `linux` in the tests): its
//! working root is `/work` and `/tmp` is its own, as in the template, and an exec runs there.
//! Tests can lose a pod mid-command ([`FakeCluster::lose_pod`]) and make watches drop
//! ([`FakeCluster::drop_next_watches`]).

use crate::websocket::{self, FrameReader, Message, Poll};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};
use warden_sandbox::{CommandSpec, KillSwitch, Sandbox, SandboxView, Stdin, ViewSpec};

/// One request the fake received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// `GET`, `POST`, …
    pub method: String,
    /// Path and query as sent.
    pub target: String,
}

/// How the fake behaves.
#[derive(Debug, Clone)]
pub struct FakeOptions {
    /// The namespace it serves.
    pub namespace: String,
    /// The warm pool claims must name.
    pub warm_pool: String,
    /// How long binding a claim to a ready pod takes.
    pub bind_delay: Duration,
}

impl Default for FakeOptions {
    fn default() -> Self {
        FakeOptions {
            namespace: "warden-sandboxes".into(),
            warm_pool: "warden".into(),
            bind_delay: Duration::from_millis(20),
        }
    }
}

struct Pod {
    view: Mutex<Option<Arc<Box<dyn SandboxView>>>>,
    running: Mutex<Vec<KillSwitch>>,
    gone: AtomicBool,
}

impl Pod {
    fn delete(&self) {
        self.gone.store(true, Ordering::SeqCst);
        for switch in lock(&self.running).drain(..) {
            switch.kill();
        }
        let Some(mut view) = lock(&self.view).take() else {
            return;
        };
        view.cancel();
        // Closed once the commands that still hold it have returned.
        for _ in 0..200 {
            match Arc::try_unwrap(view) {
                Ok(view) => {
                    let _ = view.close();
                    return;
                }
                Err(shared) => view = shared,
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[derive(Default)]
struct State {
    version: u64,
    claims: BTreeMap<String, Value>,
    /// Sandbox name → pod name.
    sandboxes: BTreeMap<String, String>,
    pods: BTreeMap<String, Arc<Pod>>,
    /// The labels of every claim created so far, in order (deleted ones included).
    created_labels: Vec<Value>,
}

struct Inner {
    state: Mutex<State>,
    changed: Condvar,
    runtime: Arc<dyn Sandbox>,
    dir: PathBuf,
    token: String,
    options: FakeOptions,
    requests: Mutex<Vec<Recorded>>,
    drop_watches: AtomicUsize,
    stopped: AtomicBool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The fake API server; stops (and deletes every pod) when dropped.
pub struct FakeCluster {
    inner: Arc<Inner>,
    port: u16,
}

impl std::fmt::Debug for FakeCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeCluster")
            .field("port", &self.port)
            .finish()
    }
}

impl FakeCluster {
    /// Starts a fake whose pods are views of `runtime`, kept under `dir`.
    pub fn start(
        runtime: Arc<dyn Sandbox>,
        dir: &Path,
        options: FakeOptions,
    ) -> std::io::Result<FakeCluster> {
        std::fs::create_dir_all(dir)?;
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let inner = Arc::new(Inner {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            runtime,
            dir: dir.to_path_buf(),
            token: "fake-token-0123".into(),
            options,
            requests: Mutex::new(Vec::new()),
            drop_watches: AtomicUsize::new(0),
            stopped: AtomicBool::new(false),
        });
        let server = inner.clone();
        std::thread::spawn(move || {
            for socket in listener.incoming() {
                if server.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(socket) = socket else { continue };
                let inner = server.clone();
                std::thread::spawn(move || {
                    let _ = inner.serve(socket);
                });
            }
        });
        let reaper = inner.clone();
        std::thread::spawn(move || {
            while !reaper.stopped.load(Ordering::SeqCst) {
                reaper.expire();
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Ok(FakeCluster { inner, port })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Writes a kubeconfig (kubectl's YAML) that reaches this fake with its token.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(
            path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
                 contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: warden\n\
                 current-context: fake\npreferences: {{}}\nusers:\n- name: warden\n  user:\n    \
                 token: {}\n",
                self.url(),
                self.inner.token
            ),
        )
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.inner.requests).clone()
    }

    /// Forgets the recorded requests.
    pub fn clear_requests(&self) {
        lock(&self.inner.requests).clear();
    }

    /// The labels of every claim created so far, deleted ones included.
    pub fn created_claim_labels(&self) -> Vec<Value> {
        lock(&self.inner.state).created_labels.clone()
    }

    /// The claims that exist now.
    pub fn claims(&self) -> Vec<String> {
        lock(&self.inner.state).claims.keys().cloned().collect()
    }

    /// A claim's object.
    pub fn claim(&self, name: &str) -> Option<Value> {
        lock(&self.inner.state).claims.get(name).cloned()
    }

    /// Creates a claim as another Warden (or an earlier life of this one) would have.
    pub fn add_claim(&self, name: &str, labels: Value) {
        let body = json!({
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxClaim",
            "metadata": {"name": name, "namespace": self.inner.options.namespace, "labels": labels},
            "spec": {"warmPoolRef": {"name": self.inner.options.warm_pool}},
        });
        let _ = self.inner.create_claim(body);
    }

    /// Deletes a claim's pod (evicted, its node gone) while the claim stays, no longer ready:
    /// commands running there are killed and their exec streams end without a status.
    pub fn lose_pod(&self, claim: &str) {
        let mut state = lock(&self.inner.state);
        let Some(object) = state.claims.get(claim).cloned() else {
            return;
        };
        let sandbox = object["status"]["sandbox"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if let Some(pod_name) = state.sandboxes.get(&sandbox).cloned() {
            if let Some(pod) = state.pods.remove(&pod_name) {
                std::thread::spawn(move || pod.delete());
            }
        }
        state.version += 1;
        let version = state.version.to_string();
        if let Some(claim) = state.claims.get_mut(claim) {
            claim["metadata"]["resourceVersion"] = json!(version);
            claim["status"]["conditions"] =
                json!([{"type": "Ready", "status": "False", "reason": "DependenciesNotReady"}]);
        }
        self.inner.changed.notify_all();
    }

    /// Moves a claim's `lifecycle.shutdownTime` into the past: the fake's controller deletes it
    /// (and its pod) within 50 ms, as an idle claim expires.
    pub fn expire_now(&self, claim: &str) {
        if let Some(object) = lock(&self.inner.state).claims.get_mut(claim) {
            object["spec"]["lifecycle"]["shutdownTime"] = json!("1970-01-01T00:00:00Z");
        }
    }

    /// The next `count` watches end abruptly after their first event.
    pub fn drop_next_watches(&self, count: usize) {
        self.inner.drop_watches.store(count, Ordering::SeqCst);
    }
}

impl Drop for FakeCluster {
    fn drop(&mut self) {
        self.inner.stopped.store(true, Ordering::SeqCst);
        let pods: Vec<Arc<Pod>> = lock(&self.inner.state).pods.values().cloned().collect();
        for pod in pods {
            pod.delete();
        }
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// A request as the fake reads it.
struct Incoming {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Incoming {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    fn path_and_query(&self) -> (&str, BTreeMap<String, Vec<String>>) {
        let (path, query) = self.target.split_once('?').unwrap_or((&self.target, ""));
        let mut params: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            params.entry(decode(key)).or_default().push(decode(value));
        }
        (path, params)
    }
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(value) = u8::from_str_radix(&text[i + 1..i + 3], 16) {
                out.push(value);
                i += 3;
                continue;
            }
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn respond(socket: &mut TcpStream, status: u16, body: &Value) -> std::io::Result<()> {
    let text = body.to_string();
    write!(
        socket,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    )?;
    socket.flush()
}

fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "message": message, "code": code}),
    )
}

impl Inner {
    fn serve(self: &Arc<Self>, socket: TcpStream) -> std::io::Result<()> {
        let mut reader = BufReader::new(socket.try_clone()?);
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let mut parts = line.split_whitespace();
        let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
            return Ok(());
        };
        let (method, target) = (method.to_string(), target.to_string());
        let mut headers = Vec::new();
        loop {
            line.clear();
            reader.read_line(&mut line)?;
            if line.trim().is_empty() {
                break;
            }
            if let Some((name, value)) = line.trim().split_once(':') {
                headers.push((name.trim().to_string(), value.trim().to_string()));
            }
        }
        let mut request = Incoming {
            method,
            target,
            headers,
            body: Vec::new(),
        };
        let length: usize = request
            .header("Content-Length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        request.body = vec![0u8; length];
        reader.read_exact(&mut request.body)?;
        lock(&self.requests).push(Recorded {
            method: request.method.clone(),
            target: request.target.clone(),
        });
        let mut socket = socket;
        if request.header("Authorization") != Some(&format!("Bearer {}", self.token)) {
            let (code, body) = status(401, "Unauthorized", "Unauthorized");
            return respond(&mut socket, code, &body);
        }
        let (path, query) = request.path_and_query();
        let ns = &self.options.namespace;
        let claims =
            format!("/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/{ns}/sandboxclaims");
        let sandboxes = format!("/apis/agents.x-k8s.io/v1beta1/namespaces/{ns}/sandboxes/");
        let pods = format!("/api/v1/namespaces/{ns}/pods/");
        let path = path.to_string();
        if let Some(rest) = path.strip_prefix(&pods) {
            if let Some(pod) = rest.strip_suffix("/exec") {
                return self.exec(socket, &request, pod, &query);
            }
        }
        let (code, body) = if path == claims {
            match request.method.as_str() {
                "POST" => match serde_json::from_slice::<Value>(&request.body) {
                    Ok(body) => self.create_claim(body),
                    Err(e) => status(400, "BadRequest", &e.to_string()),
                },
                "GET" if query.get("watch").is_some_and(|v| v[0] == "true") => {
                    return self.watch(socket, &query);
                }
                "GET" => self.list_claims(query.get("labelSelector").map(|v| v[0].as_str())),
                _ => status(405, "MethodNotAllowed", "method not allowed"),
            }
        } else if let Some(name) = path.strip_prefix(&format!("{claims}/")) {
            match request.method.as_str() {
                "GET" => match lock(&self.state).claims.get(name) {
                    Some(claim) => (200, claim.clone()),
                    None => status(
                        404,
                        "NotFound",
                        &format!("sandboxclaims \"{name}\" not found"),
                    ),
                },
                "PATCH" => self.patch_claim(name, &request),
                "DELETE" => self.delete_claim(name),
                _ => status(405, "MethodNotAllowed", "method not allowed"),
            }
        } else if let Some(name) = path.strip_prefix(&sandboxes) {
            let state = lock(&self.state);
            match state.sandboxes.get(name) {
                Some(pod) => (
                    200,
                    json!({"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
                           "metadata": {"name": name, "annotations": {"agents.x-k8s.io/pod-name": pod}},
                           "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
                ),
                None => status(404, "NotFound", &format!("sandboxes \"{name}\" not found")),
            }
        } else {
            status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            )
        };
        respond(&mut socket, code, &body)
    }

    fn create_claim(self: &Arc<Self>, mut body: Value) -> (u16, Value) {
        let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
        if name.is_empty() || !crate::names::is_dns_label(&name) {
            return status(
                422,
                "Invalid",
                &format!("metadata.name {name:?} is not a DNS label of at most 63 characters"),
            );
        }
        if body["kind"] != "SandboxClaim" {
            return status(400, "BadRequest", "kind must be SandboxClaim");
        }
        if !body["spec"]["env"].is_null() {
            return status(
                422,
                "Invalid",
                "spec.env: the template's envVarsInjectionPolicy is Disallowed",
            );
        }
        if body["spec"]["warmPoolRef"]["name"] != self.options.warm_pool.as_str() {
            return status(422, "Invalid", "spec.warmPoolRef.name names no warm pool");
        }
        let mut state = lock(&self.state);
        if state.claims.contains_key(&name) {
            return status(
                409,
                "AlreadyExists",
                &format!("sandboxclaims \"{name}\" already exists"),
            );
        }
        state.version += 1;
        body["metadata"]["resourceVersion"] = json!(state.version.to_string());
        body["metadata"]["uid"] = json!(format!("uid-{name}"));
        body["status"] = json!({});
        state.claims.insert(name.clone(), body.clone());
        state
            .created_labels
            .push(body["metadata"]["labels"].clone());
        drop(state);
        self.changed.notify_all();
        let inner = self.clone();
        std::thread::spawn(move || {
            std::thread::sleep(inner.options.bind_delay);
            inner.bind(&name);
        });
        (201, body)
    }

    /// Binds a claim to a new pod: a writable view of the runtime, `/work` empty.
    fn bind(&self, claim: &str) {
        let pod_name = format!("{claim}-pod");
        let pod_dir = self.dir.join(&pod_name);
        let image = pod_dir.join("image");
        let view = std::fs::create_dir_all(&image)
            .map_err(|e| e.to_string())
            .and_then(|()| {
                self.runtime
                    .open(&ViewSpec {
                        lower: vec![("work".into(), image.clone())],
                        writable: true,
                        scratch_dir: pod_dir.join("scratch"),
                        mounts: Vec::new(),
                        egress_proxy: None,
                        seed: None,
                    })
                    .map_err(|e| e.to_string())
            });
        let mut state = lock(&self.state);
        if !state.claims.contains_key(claim) {
            if let Ok(view) = view {
                let _ = view.close();
            }
            return;
        }
        state.version += 1;
        let version = state.version.to_string();
        let sandbox = format!("sb-{claim}");
        let status = match view {
            Ok(view) => {
                state.pods.insert(
                    pod_name.clone(),
                    Arc::new(Pod {
                        view: Mutex::new(Some(Arc::new(view))),
                        running: Mutex::new(Vec::new()),
                        gone: AtomicBool::new(false),
                    }),
                );
                state.sandboxes.insert(sandbox.clone(), pod_name);
                json!({"sandbox": {"name": sandbox},
                       "conditions": [{"type": "Ready", "status": "True", "reason": "DependenciesReady"}]})
            }
            Err(error) => {
                json!({"conditions": [{"type": "Ready", "status": "False", "reason": "ReconcilerError", "message": error}]})
            }
        };
        if let Some(object) = state.claims.get_mut(claim) {
            object["status"] = status;
            object["metadata"]["resourceVersion"] = json!(version);
        }
        drop(state);
        self.changed.notify_all();
    }

    fn patch_claim(&self, name: &str, request: &Incoming) -> (u16, Value) {
        if request.header("Content-Type") != Some("application/merge-patch+json") {
            return status(415, "UnsupportedMediaType", "expected a merge patch");
        }
        let Ok(patch) = serde_json::from_slice::<Value>(&request.body) else {
            return status(400, "BadRequest", "invalid JSON");
        };
        let mut state = lock(&self.state);
        state.version += 1;
        let version = state.version.to_string();
        let Some(claim) = state.claims.get_mut(name) else {
            return status(
                404,
                "NotFound",
                &format!("sandboxclaims \"{name}\" not found"),
            );
        };
        merge(claim, &patch);
        claim["metadata"]["resourceVersion"] = json!(version);
        let claim = claim.clone();
        drop(state);
        self.changed.notify_all();
        (200, claim)
    }

    fn delete_claim(&self, name: &str) -> (u16, Value) {
        let mut state = lock(&self.state);
        let Some(claim) = state.claims.remove(name) else {
            return status(
                404,
                "NotFound",
                &format!("sandboxclaims \"{name}\" not found"),
            );
        };
        state.version += 1;
        let sandbox = claim["status"]["sandbox"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if let Some(pod_name) = state.sandboxes.remove(&sandbox) {
            if let Some(pod) = state.pods.remove(&pod_name) {
                std::thread::spawn(move || pod.delete());
            }
        }
        drop(state);
        self.changed.notify_all();
        (200, json!({"kind": "Status", "status": "Success"}))
    }

    fn list_claims(&self, selector: Option<&str>) -> (u16, Value) {
        let wanted: Vec<(&str, &str)> = selector
            .unwrap_or("")
            .split(',')
            .filter(|p| !p.is_empty())
            .filter_map(|p| p.split_once('='))
            .collect();
        let state = lock(&self.state);
        let items: Vec<Value> = state
            .claims
            .values()
            .filter(|claim| {
                wanted
                    .iter()
                    .all(|(key, value)| claim["metadata"]["labels"][*key] == *value)
            })
            .cloned()
            .collect();
        (
            200,
            json!({"kind": "SandboxClaimList", "metadata": {"resourceVersion": state.version.to_string()}, "items": items}),
        )
    }

    /// Deletes the claims past their `lifecycle.shutdownTime` (shutdownPolicy `Delete`).
    fn expire(&self) {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let due: Vec<String> = lock(&self.state)
            .claims
            .iter()
            .filter(|(_, claim)| {
                claim["spec"]["lifecycle"]["shutdownTime"]
                    .as_str()
                    .and_then(parse_rfc3339)
                    .is_some_and(|at| at <= now)
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in due {
            self.delete_claim(&name);
        }
    }

    fn watch(
        &self,
        mut socket: TcpStream,
        query: &BTreeMap<String, Vec<String>>,
    ) -> std::io::Result<()> {
        let name = query
            .get("fieldSelector")
            .and_then(|v| v[0].strip_prefix("metadata.name="))
            .unwrap_or("")
            .to_string();
        let mut seen: u64 = query
            .get("resourceVersion")
            .and_then(|v| v[0].parse().ok())
            .unwrap_or(0);
        let timeout = query
            .get("timeoutSeconds")
            .and_then(|v| v[0].parse().ok())
            .unwrap_or(60u64);
        let deadline = Instant::now() + Duration::from_secs(timeout);
        let drop_after_first = self
            .drop_watches
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        socket.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")?;
        let send = |socket: &mut TcpStream, kind: &str, object: &Value| -> std::io::Result<()> {
            let line = format!("{}\n", json!({"type": kind, "object": object}));
            write!(socket, "{:x}\r\n{line}\r\n", line.len())?;
            socket.flush()
        };
        let mut state = lock(&self.state);
        loop {
            match state.claims.get(&name) {
                None => {
                    send(&mut socket, "DELETED", &json!({"metadata": {"name": name}}))?;
                    break;
                }
                Some(claim) => {
                    let version: u64 = claim["metadata"]["resourceVersion"]
                        .as_str()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    if version > seen {
                        seen = version;
                        let claim = claim.clone();
                        send(&mut socket, "MODIFIED", &claim)?;
                        if drop_after_first {
                            // Dropped mid-stream: no final chunk.
                            let _ = socket.shutdown(std::net::Shutdown::Both);
                            return Ok(());
                        }
                    }
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.stopped.load(Ordering::SeqCst) {
                break;
            }
            state = self
                .changed
                .wait_timeout(state, left.min(Duration::from_millis(200)))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        drop(state);
        socket.write_all(b"0\r\n\r\n")?;
        socket.flush()
    }

    fn exec(
        &self,
        mut socket: TcpStream,
        request: &Incoming,
        pod_name: &str,
        query: &BTreeMap<String, Vec<String>>,
    ) -> std::io::Result<()> {
        let pod = lock(&self.state).pods.get(pod_name).cloned();
        let Some(pod) = pod else {
            let (code, body) = status(404, "NotFound", &format!("pods \"{pod_name}\" not found"));
            return respond(&mut socket, code, &body);
        };
        if query.get("container").map(|v| v[0].as_str()) != Some(crate::CONTAINER) {
            let (code, body) = status(400, "BadRequest", "container not found");
            return respond(&mut socket, code, &body);
        }
        let offered: Vec<String> = request
            .header("Sec-WebSocket-Protocol")
            .unwrap_or("")
            .split(',')
            .map(|p| p.trim().to_string())
            .collect();
        let protocol = ["v5.channel.k8s.io", "v4.channel.k8s.io"]
            .into_iter()
            .find(|p| offered.iter().any(|o| o == p));
        let (Some(protocol), Some(key)) = (protocol, request.header("Sec-WebSocket-Key")) else {
            let (code, body) = status(
                400,
                "BadRequest",
                "a WebSocket upgrade with v5 or v4.channel.k8s.io",
            );
            return respond(&mut socket, code, &body);
        };
        write!(
            socket,
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\nSec-WebSocket-Protocol: {protocol}\r\n\r\n",
            websocket::accept_key(key)
        )?;
        socket.flush()?;
        let argv = query.get("command").cloned().unwrap_or_default();
        let wants_stdin = query.get("stdin").is_some_and(|v| v[0] == "true");
        let writer = Arc::new(Mutex::new(socket.try_clone()?));
        let (pipe_reader, pipe_writer) = std::io::pipe()?;
        let switch = KillSwitch::new();
        lock(&pod.running).push(switch.clone());
        // The client's side: stdin, its half-close, or the stream ending.
        let reader_socket = socket.try_clone()?;
        let reader_switch = switch.clone();
        let finished = Arc::new(AtomicBool::new(false));
        let reader_finished = finished.clone();
        let pong_writer = writer.clone();
        std::thread::spawn(move || {
            let mut input = reader_socket;
            let _ = input.set_read_timeout(Some(Duration::from_millis(100)));
            let mut frames = FrameReader::default();
            let mut stdin = Some(pipe_writer);
            loop {
                if reader_finished.load(Ordering::SeqCst) {
                    return;
                }
                let polled = frames.poll(&mut input, &mut |payload| {
                    websocket::write_message(&mut *lock(&pong_writer), 0xA, payload, false)
                });
                match polled {
                    Ok(Poll::Nothing) => {}
                    Ok(Poll::Message(Message::Binary(data) | Message::Text(data))) => {
                        match data.split_first() {
                            Some((&0, rest)) => {
                                if let Some(pipe) = stdin.as_mut() {
                                    if pipe.write_all(rest).is_err() {
                                        stdin = None;
                                    }
                                }
                            }
                            Some((&255, [0])) => stdin = None,
                            _ => {}
                        }
                    }
                    Ok(Poll::Message(Message::Close)) | Ok(Poll::Eof) | Err(_) => {
                        // The client went away: its command goes too.
                        drop(stdin.take());
                        if !reader_finished.load(Ordering::SeqCst) {
                            reader_switch.kill();
                        }
                        return;
                    }
                }
            }
        });
        let mut env = warden_sandbox::baseline_env();
        env.retain(|(name, _)| name != "HOME" && name != "USER");
        let spec = CommandSpec {
            argv: argv.clone(),
            env,
            cwd: String::new(),
            timeout: Duration::from_secs(3600),
            output_limit: 1 << 30,
            limits: warden_sandbox::ResourceLimits::default(),
            stdin: wants_stdin.then(|| Stdin(Arc::new(std::os::fd::OwnedFd::from(pipe_reader)))),
            kill: Some(switch.clone()),
        };
        let output_writer = writer.clone();
        let mut on_output = |stream: warden_sandbox::Stream, data: &[u8]| {
            let channel = match stream {
                warden_sandbox::Stream::Stdout => 1u8,
                warden_sandbox::Stream::Stderr => 2u8,
            };
            for chunk in data.chunks(32 << 10) {
                let mut message = Vec::with_capacity(chunk.len() + 1);
                message.push(channel);
                message.extend_from_slice(chunk);
                let _ = websocket::write_message(&mut *lock(&output_writer), 0x2, &message, false);
            }
        };
        let view = lock(&pod.view).clone();
        let result = match view {
            Some(view) => view.run_streaming(&spec, &mut on_output),
            None => Err(warden_sandbox::SandboxError::InvalidRequest(
                "the pod is gone".into(),
            )),
        };
        finished.store(true, Ordering::SeqCst);
        lock(&pod.running).retain(|s| s != &switch);
        if pod.gone.load(Ordering::SeqCst) {
            // A lost pod's stream ends without a status.
            let _ = socket.shutdown(std::net::Shutdown::Both);
            return Ok(());
        }
        let status = match result {
            Ok(output) => match (output.exit_code, output.signal) {
                (Some(0), _) => json!({"metadata": {}, "status": "Success"}),
                (code, signal) => {
                    let code = code.unwrap_or(128 + signal.unwrap_or(0));
                    json!({"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
                           "message": format!("command terminated with non-zero exit code: {code}"),
                           "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}})
                }
            },
            Err(error) => {
                json!({"metadata": {}, "status": "Failure", "reason": "InternalError", "message": error.to_string()})
            }
        };
        let mut message = vec![3u8];
        message.extend_from_slice(status.to_string().as_bytes());
        let mut out = lock(&writer);
        let _ = websocket::write_message(&mut *out, 0x2, &message, false);
        let _ = websocket::write_message(&mut *out, 0x8, &[], false);
        let _ = socket.shutdown(std::net::Shutdown::Both);
        Ok(())
    }
}

/// A JSON merge patch (RFC 7386).
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    target.remove(key);
                } else {
                    merge(target.entry(key.clone()).or_insert(Value::Null), value);
                }
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}

/// Seconds since the epoch of an RFC 3339 time (`2026-01-02T03:04:05Z`, fractions dropped).
fn parse_rfc3339(text: &str) -> Option<u64> {
    u64::try_from(warden_time::parse_rfc3339(text).ok()? / 1000).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_back() {
        for seconds in [0, 951_782_400, 1_767_323_045] {
            let text = warden_time::rfc3339_seconds(seconds * 1000);
            assert_eq!(parse_rfc3339(&text), u64::try_from(seconds).ok(), "{text}");
        }
        assert_eq!(parse_rfc3339("2026-13-01T00:00:00Z"), None);
    }

    #[test]
    fn merge_patches() {
        let mut claim =
            json!({"spec": {"lifecycle": {"shutdownTime": "a", "shutdownPolicy": "Delete"}}});
        merge(
            &mut claim,
            &json!({"spec": {"lifecycle": {"shutdownTime": "b"}}}),
        );
        assert_eq!(
            claim["spec"]["lifecycle"],
            json!({"shutdownTime": "b", "shutdownPolicy": "Delete"})
        );
    }
}
