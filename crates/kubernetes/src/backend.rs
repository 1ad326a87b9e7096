//! The `kubernetes` backend: `warden_sandbox::Sandbox` over agent-sandbox.
//!
//! Opening a view claims a pod: a `SandboxClaim` on the warm pool (expiring `idle_timeout` ahead:
//! a heartbeat pushes its expiry forward for as long as the view is open, so only a Warden that
//! is gone lets it expire), watched until it is bound to a ready `Sandbox`, whose pod the view then
//! execs into. A pod shares no file system with Warden, so the view's tree travels as tar over
//! exec: the snapshots (and a seed) into `/work` when the view opens; for a writable view, what
//! a command changed back into a host copy after every command (what `root()` shows), and what
//! Warden changed in that copy (the edit tools) into the pod before the next one. Each command
//! runs under a small `sh` supervisor in the pod ([`RUN`]): its own session and process group,
//! killed with its group at its timeout, at a kill switch or when the view is cancelled (a stop
//! file the supervisor watches), and the whole group killed when it ends. Closing the view
//! deletes the claim, and with it the sandbox and the pod.
//!
//! Fail closed: a claim that is not bound in time, or a tree that cannot be delivered, is
//! `SandboxError::Unavailable` naming the layer (`runtime`, `filesystem`); a pod that goes away
//! mid-task is `SandboxError::Lost`, which ends the run instead of letting the agent retry into
//! it.

use crate::client::{ChannelWriter, Client, ExecEnd, ExecIo, NewClaim};
use crate::{tar, ClientError, KubernetesConfig};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};
use warden_sandbox::kit::{self, ValidatedView};
use warden_sandbox::{
    Backend, CommandOutput, CommandSpec, Layer, Sandbox, SandboxError, SandboxView, Stream,
    ViewSpec,
};

/// Where Warden's own state lives in a pod: stop files, the listing a sync compares with.
const STATE: &str = "/tmp/.warden";

/// Unpacks the view's tree into `/work`; `$1` is `writable` to record the listing later syncs
/// compare with.
const UPLOAD: &str = r#"set -e
d=/tmp/.warden
mkdir -p "$d/stop"
cd /work
tar -x -p --no-same-owner -f -
if [ "$1" = writable ]; then
  find . -mindepth 1 -printf '%y %m %s %C@ %P\0' | LC_ALL=C sort -z > "$d/old"
fi
"#;

/// Applies Warden's changes: `$1` bytes of NUL-separated paths to delete, then a tar of what
/// changed; then records the listing.
const PUSH: &str = r#"set -e
d=/tmp/.warden
cd /work
head -c "$1" > "$d/gone-in"
if [ -s "$d/gone-in" ]; then xargs -0 rm -rf -- < "$d/gone-in"; fi
tar -x -p --no-same-owner -f -
find . -mindepth 1 -printf '%y %m %s %C@ %P\0' | LC_ALL=C sort -z > "$d/old"
"#;

/// Sends back what changed since the last listing: the listing lines that went, those that
/// came, and the entries that came, as one tar.
const SYNC: &str = r#"set -e
d=/tmp/.warden
cd /work
find . -mindepth 1 -printf '%y %m %s %C@ %P\0' | LC_ALL=C sort -z > "$d/new"
LC_ALL=C comm -z -23 "$d/old" "$d/new" > "$d/gone"
LC_ALL=C comm -z -13 "$d/old" "$d/new" > "$d/came"
sed -z 's/^[^ ]* [^ ]* [^ ]* [^ ]* //' "$d/came" > "$d/paths"
mv "$d/new" "$d/old"
tar --format=posix --hard-dereference -c -f - -P "$d/gone" "$d/came" --no-recursion --null -T "$d/paths"
"#;

/// Runs one command: `$1` its id, `$2` its timeout in seconds, `$3` its directory under
/// `/work`, then `env -i` assignments and argv. Its own session; killed with its process group
/// at the timeout or when `stop/<id>` or `stop/all` appears; whatever is left of the group is
/// killed when it ends.
pub(crate) const RUN: &str = r#"id=$1; secs=$2; cwd=$3; shift 3
d=/tmp/.warden
if [ -e "$d/stop/all" ]; then exit 137; fi
cd "/work/$cwd" || exit 126
# An asynchronous command's stdin is /dev/null unless redirected from another descriptor.
exec 3<&0
setsid env -i "$@" <&3 3<&- &
pid=$!
exec 3<&-
(
  end=$(( $(date +%s) + secs ))
  while kill -0 "$pid" 2>/dev/null; do
    if [ -e "$d/stop/$id" ] || [ -e "$d/stop/all" ] || [ "$(date +%s)" -ge "$end" ]; then
      kill -9 "-$pid" 2>/dev/null
      exit 0
    fi
    sleep 0.05
  done
) </dev/null >/dev/null 2>&1 &
watcher=$!
wait "$pid"
status=$?
kill "$watcher" 2>/dev/null
kill -9 "-$pid" 2>/dev/null
exit $status
"#;

/// How long past a command's timeout Warden waits for the pod to report it killed.
const GRACE: Duration = Duration::from_secs(10);
/// How long a control exec (upload, sync, stop) may take.
const CONTROL: Duration = Duration::from_secs(300);

/// One claim of this Warden's, as `warden doctor` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimSummary {
    pub name: String,
    /// Its `warden.dev/task` label: the task it serves.
    pub task: Option<String>,
}

/// The kubernetes backend.
#[derive(Debug)]
pub struct KubernetesSandbox {
    client: Arc<Client>,
    config: KubernetesConfig,
    /// How often activity pushes a claim's expiry forward: a quarter of the idle timeout, so
    /// a burst of commands costs one `PATCH` and a claim never comes within three quarters of
    /// it while in use.
    keep_alive_every: Duration,
    /// The task its views serve, labelled on their claims (`warden.dev/task`).
    task: Option<String>,
}

impl KubernetesSandbox {
    /// Reads the credentials and builds the client; nothing is sent yet. Unreadable
    /// credentials are `Unavailable` at layer `runtime`.
    pub fn connect(config: &KubernetesConfig) -> Result<KubernetesSandbox, SandboxError> {
        config.validate().map_err(SandboxError::InvalidConfig)?;
        let endpoint =
            crate::kubeconfig::endpoint(&config.credentials, &|name| std::env::var(name).ok())
                .map_err(|error| unavailable(Layer::Runtime, error.to_string()))?;
        Ok(KubernetesSandbox {
            client: Arc::new(Client::new(endpoint, &config.namespace)),
            config: config.clone(),
            keep_alive_every: config.idle_timeout / 4,
            task: None,
        })
    }

    /// Labels the claims of this sandbox's views with `task` (`warden.dev/task`), so an
    /// operator finds a task's claim with a label selector. A value Kubernetes would refuse as
    /// a label is left off.
    pub fn for_task(mut self, task: &str) -> KubernetesSandbox {
        self.task = Some(task.to_string());
        self
    }

    /// Pushes expiries forward this often instead (tests against the fake, whose clock they
    /// cannot wait a quarter of a minute for).
    #[cfg(feature = "fake")]
    pub fn with_keep_alive_every(mut self, every: Duration) -> KubernetesSandbox {
        self.keep_alive_every = every;
        self
    }

    /// Requests sent to the API server so far (exec included), by this backend and its views.
    pub fn requests(&self) -> u64 {
        self.client.requests()
    }

    /// What `warden doctor` asks of the cluster, changing nothing: the claims of this Warden
    /// ([`KubernetesConfig::owner`]) in the namespace, listed with Warden's credentials (which
    /// proves the endpoint, the credentials, the namespace and the `list` right). How many.
    pub fn probe(&self) -> Result<Vec<ClaimSummary>, SandboxError> {
        self.client
            .list_claims(&self.owner_selector())
            .map(|claims| {
                claims
                    .iter()
                    .map(|claim| ClaimSummary {
                        name: claim["metadata"]["name"].as_str().unwrap_or("").to_string(),
                        task: claim["metadata"]["labels"][crate::names::TASK_LABEL]
                            .as_str()
                            .map(str::to_string),
                    })
                    .collect()
            })
            .map_err(|error| {
                let hint = match &error {
                    ClientError::Status { status: 404, .. } => format!(
                        "; is agent-sandbox's extensions release installed (SandboxClaim in \
                         extensions.agents.x-k8s.io), and does namespace {} exist?",
                        self.config.namespace
                    ),
                    ClientError::Status {
                        status: 401 | 403, ..
                    } => "; apply the Role and RoleBinding `warden k8s render` prints, and give \
                          Warden its service account's token"
                        .to_string(),
                    _ => String::new(),
                };
                unavailable(
                    Layer::Runtime,
                    format!("list this Warden's claims: {error}{hint}"),
                )
            })
    }

    /// The label selector of this Warden's claims (`managed-by` Warden, its owner).
    fn owner_selector(&self) -> String {
        format!(
            "{}={},{}={}",
            crate::names::MANAGED_BY.0,
            crate::names::MANAGED_BY.1,
            crate::names::OWNER_LABEL,
            self.config.owner
        )
    }

    /// Deletes the claims this Warden ([`KubernetesConfig::owner`]) left behind: at start-up
    /// no task of it holds any. Returns their names.
    pub fn reap_orphans(&self) -> Result<Vec<String>, SandboxError> {
        let selector = self.owner_selector();
        let claims = self
            .client
            .list_claims(&selector)
            .map_err(|e| unavailable(Layer::Runtime, format!("list this Warden's claims: {e}")))?;
        let mut reaped = Vec::new();
        for claim in claims {
            let Some(name) = claim["metadata"]["name"].as_str() else {
                continue;
            };
            if self
                .client
                .delete_claim(name)
                .map_err(|e| unavailable(Layer::Runtime, format!("delete claim {name}: {e}")))?
            {
                reaped.push(name.to_string());
            }
        }
        Ok(reaped)
    }

    /// Claims a pod and waits until it is ready; `(claim, pod)`.
    fn claim(&self) -> Result<(String, String), String> {
        let mut random = [0u8; 10];
        getrandom::fill(&mut random).map_err(|e| format!("randomness: {e}"))?;
        let name = crate::names::claim_name(random);
        let created = self
            .client
            .create_claim(&NewClaim {
                name: &name,
                warm_pool: &self.config.warm_pool,
                owner: &self.config.owner,
                task: self.task.as_deref(),
                shutdown_time: &expiry(self.config.idle_timeout),
            })
            .map_err(|e| {
                format!(
                    "cannot claim a sandbox from warm pool {}: {e}",
                    self.config.warm_pool
                )
            })?;
        match self.wait_ready(&name, created) {
            Ok(pod) => Ok((name, pod)),
            Err(reason) => {
                let _ = self.client.delete_claim(&name);
                Err(reason)
            }
        }
    }

    fn wait_ready(&self, name: &str, mut claim: serde_json::Value) -> Result<String, String> {
        let deadline = Instant::now() + self.config.claim_timeout;
        let late = || {
            format!(
                "claim {name} on warm pool {} was not bound to a ready sandbox within {}s",
                self.config.warm_pool,
                self.config.claim_timeout.as_secs()
            )
        };
        while !claim_ready(&claim) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(late());
            }
            let version = claim["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("0")
                .to_string();
            if let Ok(mut watch) = self
                .client
                .watch_claim(name, &version, left.as_secs().max(1))
            {
                while let Some((kind, object)) = watch.next_event() {
                    match kind.as_str() {
                        "DELETED" => return Err(format!("claim {name} was deleted")),
                        "ADDED" | "MODIFIED" => {
                            claim = object;
                            if claim_ready(&claim) {
                                break;
                            }
                        }
                        "BOOKMARK" => {
                            claim["metadata"]["resourceVersion"] =
                                object["metadata"]["resourceVersion"].clone();
                        }
                        _ => break,
                    }
                    if Instant::now() >= deadline {
                        return Err(late());
                    }
                }
            }
            if claim_ready(&claim) {
                break;
            }
            // The watch ended or dropped: read the claim again and watch from there.
            claim = match self.client.get_claim(name) {
                Ok(Some(claim)) => claim,
                Ok(None) => return Err(format!("claim {name} was deleted")),
                Err(e) if e.is_retryable() => {
                    std::thread::sleep(Duration::from_millis(200));
                    claim
                }
                Err(e) => return Err(format!("claim {name}: {e}")),
            };
        }
        let sandbox = claim["status"]["sandbox"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let object = self
            .client
            .get_sandbox(&sandbox)
            .map_err(|e| format!("sandbox {sandbox} of claim {name}: {e}"))?
            .ok_or_else(|| format!("sandbox {sandbox} of claim {name} is gone"))?;
        Ok(
            object["metadata"]["annotations"]["agents.x-k8s.io/pod-name"]
                .as_str()
                .filter(|pod| !pod.is_empty())
                .unwrap_or(&sandbox)
                .to_string(),
        )
    }
}

fn claim_ready(claim: &serde_json::Value) -> bool {
    let bound = claim["status"]["sandbox"]["name"]
        .as_str()
        .is_some_and(|name| !name.is_empty());
    let ready = claim["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    bound && ready
}

fn io_error(context: &str, source: std::io::Error) -> SandboxError {
    SandboxError::Io {
        context: context.to_string(),
        source,
    }
}

fn unavailable(layer: Layer, reason: String) -> SandboxError {
    SandboxError::Unavailable {
        backend: Backend::Kubernetes,
        layer,
        reason,
    }
}

/// `now + after` as RFC 3339 (UTC, whole seconds).
fn expiry(after: Duration) -> String {
    let at = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .saturating_add(after);
    warden_time::rfc3339_seconds(i64::try_from(at.as_millis()).unwrap_or(i64::MAX))
}

impl Sandbox for KubernetesSandbox {
    fn backend(&self) -> Backend {
        Backend::Kubernetes
    }

    fn open(&self, view: &ViewSpec) -> Result<Box<dyn SandboxView>, SandboxError> {
        let validated = kit::validate_view(view)?;
        if let Some(mount) = view.mounts.first() {
            return Err(unavailable(
                Layer::Filesystem,
                format!(
                    "a pod cannot show host directory {}: the kubernetes backend mounts nothing \
                     of Warden's host; put toolchains in the template's image ([kubernetes] \
                     image) and leave [sandbox] toolchains and mounts empty",
                    mount.path.display()
                ),
            ));
        }
        if view.egress_proxy.is_some() {
            return Err(SandboxError::InvalidRequest(
                "the kubernetes backend does not relay to an egress proxy yet".into(),
            ));
        }
        let seed = kit::validate_seed(view)?;
        kit::prepare_scratch(&view.scratch_dir)?;
        let (root, uploads) = host_tree(&validated, view, seed.as_deref())?;
        let (claim, pod) = self
            .claim()
            .map_err(|reason| unavailable(Layer::Runtime, reason))?;
        let opened = KubernetesView {
            client: self.client.clone(),
            idle_timeout: self.config.idle_timeout,
            keep_alive_every: self.keep_alive_every,
            claim,
            pod,
            root,
            scratch: view.scratch_dir.clone(),
            writable: view.writable,
            host: Mutex::new(None),
            cancelled: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            last_extend: Arc::new(Mutex::new(Instant::now())),
            alive: Mutex::new(None),
        };
        *opened.alive.lock().unwrap_or_else(PoisonError::into_inner) = Some(opened.heartbeat());
        if let Err(error) = opened.upload(&uploads) {
            let _ = opened.client.delete_claim(&opened.claim);
            return Err(unavailable(
                Layer::Filesystem,
                format!(
                    "cannot deliver the view's tree to pod {}: {error}",
                    opened.pod
                ),
            ));
        }
        Ok(Box::new(opened))
    }
}

/// The host side of a view: its root (what tools read and write) and the trees to upload, each
/// under a folder of the working root (`""`: the root itself).
fn host_tree(
    validated: &ValidatedView,
    view: &ViewSpec,
    seed: Option<&Path>,
) -> Result<(PathBuf, Vec<(String, PathBuf)>), SandboxError> {
    let work = view.scratch_dir.join("work");
    Ok(match (validated, view.writable) {
        (ValidatedView::Single(snapshot), false) => {
            (snapshot.clone(), vec![(String::new(), snapshot.clone())])
        }
        (ValidatedView::Single(snapshot), true) => {
            if let Some(seed) = seed {
                kit::copy_tree(seed, &work)?;
            }
            kit::copy_tree(snapshot, &work)?;
            (work.clone(), vec![(String::new(), work)])
        }
        (ValidatedView::Multi(repos), writable) => {
            std::fs::create_dir(&work).map_err(|e| SandboxError::Io {
                context: format!("cannot create {}", work.display()),
                source: e,
            })?;
            let mut uploads = Vec::new();
            for (name, snapshot) in repos {
                let target = work.join(name);
                if writable {
                    kit::copy_tree(snapshot, &target)?;
                } else {
                    std::os::unix::fs::symlink(snapshot, &target).map_err(|e| {
                        SandboxError::Io {
                            context: format!("cannot link {}", target.display()),
                            source: e,
                        }
                    })?;
                    uploads.push((name.clone(), snapshot.clone()));
                }
            }
            if writable {
                uploads.push((String::new(), work.clone()));
            }
            (work, uploads)
        }
    })
}

/// What Warden knows of one host entry, to see what changed since the last sync.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    kind: u8,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    mode: u32,
    inode: u64,
}

type HostState = BTreeMap<String, Stamp>;

fn host_state(root: &Path) -> std::io::Result<HostState> {
    fn walk(root: &Path, dir: &Path, out: &mut HostState) -> std::io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path)?;
            let relative = path
                .strip_prefix(root)
                .map_err(std::io::Error::other)?
                .to_string_lossy()
                .into_owned();
            let kind = if meta.is_dir() {
                b'd'
            } else if meta.file_type().is_symlink() {
                b'l'
            } else {
                b'f'
            };
            out.insert(
                relative,
                Stamp {
                    kind,
                    size: if kind == b'd' { 0 } else { meta.len() },
                    mtime_ns: i128::from(meta.mtime()) * 1_000_000_000
                        + i128::from(meta.mtime_nsec()),
                    ctime_ns: i128::from(meta.ctime()) * 1_000_000_000
                        + i128::from(meta.ctime_nsec()),
                    mode: meta.mode() & 0o7777,
                    inode: meta.ino(),
                },
            );
            if kind == b'd' {
                walk(root, &path, out)?;
            }
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out)?;
    Ok(out)
}

/// Writes host entries into a tar: `names` relative to `root`, under `prefix`, with their
/// modes, sizes and contents; directories before what they hold.
fn archive(
    writer: &mut tar::Writer<std::io::BufWriter<ChannelWriter>>,
    root: &Path,
    prefix: &str,
    names: &[String],
) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    for name in names {
        let path = root.join(name);
        let meta = std::fs::symlink_metadata(&path)?;
        let archived = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        let mtime = u64::try_from(meta.mtime()).unwrap_or(0);
        if meta.is_dir() {
            writer.directory(&archived, meta.mode(), mtime)?;
        } else if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path)?;
            writer.symlink(&archived, &target.to_string_lossy(), mtime)?;
        } else if meta.is_file() {
            let mut file = std::fs::File::open(&path)?;
            writer.file(&archived, meta.mode(), mtime, meta.len(), &mut file)?;
        }
    }
    Ok(())
}

/// Every entry under `root`, parents before children.
fn all_names(root: &Path) -> std::io::Result<Vec<String>> {
    Ok(host_state(root)?.into_keys().collect())
}

struct KubernetesView {
    client: Arc<Client>,
    idle_timeout: Duration,
    keep_alive_every: Duration,
    claim: String,
    pod: String,
    root: PathBuf,
    scratch: PathBuf,
    writable: bool,
    /// Writable views: the host tree as of the last sync (and the lock that keeps syncs
    /// whole).
    host: Mutex<Option<HostState>>,
    cancelled: AtomicBool,
    next_id: AtomicU64,
    /// When the claim's expiry was last pushed forward.
    last_extend: Arc<Mutex<Instant>>,
    /// The heartbeat that pushes the claim's expiry forward while the view is open
    /// ([`KubernetesView::heartbeat`]); dropped (and so stopped) with the view.
    alive: Mutex<Option<std::sync::mpsc::Sender<()>>>,
}

/// A tar produced on a thread of its own into an exec's stdin, in chunks of up to 64 KiB.
fn tar_stdin(
    produce: impl FnOnce(&mut tar::Writer<std::io::BufWriter<ChannelWriter>>) -> std::io::Result<()>
        + Send
        + 'static,
    head: Vec<u8>,
) -> std::sync::mpsc::Receiver<Vec<u8>> {
    let (sender, receiver) = std::sync::mpsc::sync_channel::<Vec<u8>>(16);
    std::thread::spawn(move || {
        if !head.is_empty() && sender.send(head).is_err() {
            return;
        }
        let mut writer = tar::Writer::new(std::io::BufWriter::with_capacity(
            64 << 10,
            ChannelWriter(sender),
        ));
        // A failure drops the sender mid-archive: tar in the pod fails, and so does the exec.
        if produce(&mut writer).is_ok() {
            let _ = writer.finish();
        }
    });
    receiver
}

impl KubernetesView {
    /// Runs a control script (upload, push, sync) and collects its stdout.
    fn control(
        &self,
        script: &str,
        args: &[&str],
        stdin: Option<std::sync::mpsc::Receiver<Vec<u8>>>,
    ) -> Result<Vec<u8>, SandboxError> {
        let mut argv = vec![
            "/bin/sh".to_string(),
            "-c".into(),
            script.into(),
            "warden".into(),
        ];
        argv.extend(args.iter().map(|a| a.to_string()));
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let mut on_output = |channel: u8, data: &[u8]| {
            let target = if channel == 1 {
                &mut stdout
            } else {
                &mut stderr
            };
            if target.len() < 1 << 30 {
                target.extend_from_slice(data);
            }
        };
        let end = self
            .client
            .exec(
                &self.pod,
                &argv,
                &mut ExecIo {
                    stdin,
                    on_output: &mut on_output,
                    deadline: Instant::now() + CONTROL,
                    stop: &|| false,
                    on_stop: &mut || {},
                },
            )
            .map_err(|e| self.exec_error(e))?;
        match end {
            ExecEnd::Exited(0) => Ok(stdout),
            ExecEnd::Exited(code) => Err(SandboxError::Io {
                context: format!("warden's script in pod {} exited {code}", self.pod),
                source: std::io::Error::other(String::from_utf8_lossy(&stderr).trim().to_string()),
            }),
            ExecEnd::Failed(message) => Err(self.lost_or(message)),
            ExecEnd::Dropped(message) => Err(self.lost_or(message)),
            ExecEnd::DeadlinePassed => Err(self.lost_or("a control exec timed out".into())),
        }
    }

    /// An exec that could not start: a pod that is gone is `Lost`.
    fn exec_error(&self, error: ClientError) -> SandboxError {
        match &error {
            ClientError::Status { status: 404, .. } => SandboxError::Lost {
                backend: Backend::Kubernetes,
                reason: format!("pod {} of claim {} is gone ({error})", self.pod, self.claim),
            },
            _ => self.lost_or(error.to_string()),
        }
    }

    /// `Lost` when the claim is gone or no longer ready, else an I/O error with `message`.
    fn lost_or(&self, message: String) -> SandboxError {
        match self.client.get_claim(&self.claim) {
            Ok(Some(claim)) if claim_ready(&claim) => SandboxError::Io {
                context: format!("exec in pod {}", self.pod),
                source: std::io::Error::other(message),
            },
            Ok(_) => SandboxError::Lost {
                backend: Backend::Kubernetes,
                reason: format!(
                    "claim {} (pod {}) is gone or no longer ready: {message}",
                    self.claim, self.pod
                ),
            },
            Err(error) => SandboxError::Lost {
                backend: Backend::Kubernetes,
                reason: format!("{message}; and the claim cannot be read: {error}"),
            },
        }
    }

    fn upload(&self, uploads: &[(String, PathBuf)]) -> Result<(), SandboxError> {
        let plan: Vec<(String, PathBuf, Vec<String>)> = uploads
            .iter()
            .map(|(prefix, root)| Ok((prefix.clone(), root.clone(), all_names(root)?)))
            .collect::<std::io::Result<_>>()
            .map_err(|e| io_error("cannot list the view's tree", e))?;
        let stdin = tar_stdin(
            move |writer| {
                for (prefix, root, names) in &plan {
                    if !prefix.is_empty() {
                        writer.directory(prefix, 0o555, 0)?;
                    }
                    archive(writer, root, prefix, names)?;
                }
                Ok(())
            },
            Vec::new(),
        );
        let mode = if self.writable {
            "writable"
        } else {
            "read-only"
        };
        self.control(UPLOAD, &[mode], Some(stdin))?;
        if self.writable {
            let state =
                host_state(&self.root).map_err(|e| io_error("cannot read the view's tree", e))?;
            *self.host.lock().unwrap_or_else(PoisonError::into_inner) = Some(state);
        }
        Ok(())
    }

    /// Sends what Warden changed in the host tree since the last sync into the pod.
    fn push(&self, known: &mut HostState) -> Result<(), SandboxError> {
        let now = host_state(&self.root).map_err(|e| io_error("cannot read the view's tree", e))?;
        let mut gone = Vec::new();
        let mut changed = Vec::new();
        for (name, stamp) in known.iter() {
            match now.get(name) {
                None => gone.push(name.clone()),
                // A changed kind is removed first, then sent anew.
                Some(current) if current.kind != stamp.kind => {
                    gone.push(name.clone());
                    changed.push(name.clone());
                }
                Some(current) if current != stamp => changed.push(name.clone()),
                Some(_) => {}
            }
        }
        for name in now.keys() {
            if !known.contains_key(name) {
                changed.push(name.clone());
            }
        }
        if gone.is_empty() && changed.is_empty() {
            return Ok(());
        }
        changed.sort();
        let mut head = Vec::new();
        for name in &gone {
            head.extend_from_slice(name.as_bytes());
            head.push(0);
        }
        let length = head.len().to_string();
        let root = self.root.clone();
        let stdin = tar_stdin(move |writer| archive(writer, &root, "", &changed), head);
        self.control(PUSH, &[&length], Some(stdin))?;
        *known = now;
        Ok(())
    }

    /// Brings what the last command changed in the pod into the host tree.
    fn sync_back(&self, known: &mut HostState) -> Result<(), SandboxError> {
        let archive = self.control(SYNC, &[], None)?;
        let mut gone: Vec<String> = Vec::new();
        let mut came: Vec<String> = Vec::new();
        let mut directories: Vec<(PathBuf, u32)> = Vec::new();
        let root = self.root.clone();
        let path_of = |listing: &[u8]| -> Vec<String> {
            listing
                .split(|&b| b == 0)
                .filter(|line| !line.is_empty())
                .filter_map(|line| {
                    let text = String::from_utf8_lossy(line);
                    text.splitn(5, ' ').nth(4).map(str::to_string)
                })
                .collect()
        };
        tar::read(&mut &archive[..], &mut |entry, data| {
            let state = format!("{STATE}/");
            if let Some(member) = entry
                .name
                .strip_prefix(&state[1..])
                .or(entry.name.strip_prefix(&state))
            {
                let mut listing = Vec::new();
                data.read_to_end(&mut listing)?;
                match member {
                    "gone" => gone = path_of(&listing),
                    "came" => came = path_of(&listing),
                    _ => {}
                }
                return Ok(());
            }
            let relative = confined(&entry.name)?;
            let target = root.join(&relative);
            write_entry(&target, entry, data, &mut directories)
        })
        .map_err(|e| io_error("cannot apply the pod's changes", e))?;
        let came: std::collections::BTreeSet<String> = came.into_iter().collect();
        let mut deleted: Vec<&String> = gone.iter().filter(|name| !came.contains(*name)).collect();
        deleted.sort_by_key(|name| std::cmp::Reverse(name.len()));
        for name in deleted {
            let relative =
                confined(name).map_err(|e| io_error("a deleted path from the pod", e))?;
            warden_sandbox::remove_scratch(&self.root.join(relative))?;
        }
        // Modes of directories last, deepest first: a read-only directory's content is
        // written before it closes.
        directories.sort_by_key(|(path, _)| std::cmp::Reverse(path.components().count()));
        for (path, mode) in directories {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode | 0o700))
                .map_err(|e| io_error("cannot set a directory's mode", e))?;
        }
        *known = host_state(&self.root).map_err(|e| io_error("cannot read the view's tree", e))?;
        Ok(())
    }

    /// Pushes the claim's expiry forward when [`KubernetesSandbox::keep_alive_every`] has
    /// passed since the last time; a claim already gone is `Lost`.
    fn keep_alive(&self) -> Result<(), SandboxError> {
        let mut last = self
            .last_extend
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if last.elapsed() < self.keep_alive_every {
            return Ok(());
        }
        match self
            .client
            .extend_claim(&self.claim, &expiry(self.idle_timeout))
        {
            Ok(true) => {
                *last = Instant::now();
                Ok(())
            }
            Ok(false) => Err(SandboxError::Lost {
                backend: Backend::Kubernetes,
                reason: format!("claim {} expired or was deleted", self.claim),
            }),
            // The command itself will tell whether the pod is still there.
            Err(_) => Ok(()),
        }
    }

    /// Keeps pushing the claim's expiry forward, every [`KubernetesSandbox::keep_alive_every`],
    /// until the returned sender is dropped — for as long as the view is open: a command (a
    /// build, a test suite) and a model turn between commands may each take longer than the
    /// idle timeout. The idle expiry is for a Warden that is gone: its heartbeats die with it.
    fn heartbeat(&self) -> std::sync::mpsc::Sender<()> {
        let (running, ended) = std::sync::mpsc::channel::<()>();
        let client = self.client.clone();
        let claim = self.claim.clone();
        let idle_timeout = self.idle_timeout;
        let every = self.keep_alive_every.max(Duration::from_millis(100));
        let last_extend = self.last_extend.clone();
        std::thread::spawn(move || {
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = ended.recv_timeout(every) {
                // A claim that is gone shows in the command's own end.
                if let Ok(true) = client.extend_claim(&claim, &expiry(idle_timeout)) {
                    *last_extend.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
                }
            }
        });
        running
    }

    fn stop_file(&self, name: String) {
        let client = self.client.clone();
        let pod = self.pod.clone();
        std::thread::spawn(move || {
            let argv = vec![
                "/bin/sh".to_string(),
                "-c".into(),
                format!("mkdir -p {STATE}/stop && : > {STATE}/stop/{name}"),
            ];
            let _ = client.exec(
                &pod,
                &argv,
                &mut ExecIo {
                    stdin: None,
                    on_output: &mut |_, _| {},
                    deadline: Instant::now() + Duration::from_secs(30),
                    stop: &|| false,
                    on_stop: &mut || {},
                },
            );
        });
    }
}

/// A relative path from the pod, checked: no `..`, not absolute, nothing under `.git`'s
/// parent-escaping forms.
fn confined(name: &str) -> std::io::Result<PathBuf> {
    let path = Path::new(name);
    let ok = !name.is_empty()
        && path
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
    if ok {
        Ok(path.to_path_buf())
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("the pod sent a path outside the working root: {name:?}"),
        ))
    }
}

/// Writes one entry from the pod into the host tree, replacing what is there.
fn write_entry(
    target: &Path,
    entry: &tar::Entry,
    data: &mut dyn Read,
    directories: &mut Vec<(PathBuf, u32)>,
) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let existing = std::fs::symlink_metadata(target).ok();
    let same_kind = existing.as_ref().is_some_and(|meta| match entry.kind {
        tar::Kind::Directory => meta.is_dir(),
        tar::Kind::File { .. } => meta.is_file(),
        tar::Kind::Symlink { .. } => false,
    });
    if existing.is_some() && !same_kind {
        warden_sandbox::remove_scratch(target).map_err(std::io::Error::other)?;
    }
    match &entry.kind {
        tar::Kind::Directory => {
            std::fs::create_dir_all(target)?;
            std::fs::set_permissions(target, std::fs::Permissions::from_mode(0o755))?;
            directories.push((target.to_path_buf(), entry.mode));
        }
        tar::Kind::Symlink { target: link } => {
            std::os::unix::fs::symlink(link, target)?;
        }
        tar::Kind::File { .. } => {
            if same_kind {
                std::fs::set_permissions(target, std::fs::Permissions::from_mode(0o600))?;
            }
            let mut file = std::fs::File::create(target)?;
            std::io::copy(data, &mut file)?;
            std::fs::set_permissions(target, std::fs::Permissions::from_mode(entry.mode & 0o7777))?;
        }
    }
    Ok(())
}

impl SandboxView for KubernetesView {
    fn root(&self) -> &Path {
        &self.root
    }

    fn run_streaming(
        &self,
        command: &CommandSpec,
        on_output: &mut dyn FnMut(Stream, &[u8]),
    ) -> Result<CommandOutput, SandboxError> {
        let cwd = kit::validate_command(command)?;
        let started = Instant::now();
        if self.cancelled.load(Ordering::SeqCst) {
            return Ok(kit::cancelled_output(
                vec![],
                vec![],
                false,
                started.elapsed(),
            ));
        }
        if command.argv[0].contains('=') {
            return Err(SandboxError::InvalidRequest(format!(
                "program {:?} contains '=' (it would read as an environment assignment)",
                command.argv[0]
            )));
        }
        self.keep_alive()?;
        // Writable views: Warden's own edits reach the pod first; the lock keeps a sync whole.
        let mut host = self.host.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(known) = host.as_mut() {
            self.push(known)?;
        }
        drop(host);
        let id = self.next_id.fetch_add(1, Ordering::SeqCst).to_string();
        // The pod's own backstop, never early: Warden stops the command at its timeout.
        let seconds = command.timeout.as_secs_f64().ceil() as u64 + 1;
        let mut argv = vec![
            "/bin/sh".to_string(),
            "-c".into(),
            RUN.into(),
            "warden".into(),
            id.clone(),
            seconds.to_string(),
            cwd,
        ];
        argv.extend(command.env.iter().map(|(k, v)| format!("{k}={v}")));
        argv.extend(command.argv.iter().cloned());
        let stdin = match &command.stdin {
            None => None,
            Some(fd) => {
                let file = std::fs::File::from(
                    fd.0.try_clone()
                        .map_err(|e| io_error("cannot duplicate the command's stdin", e))?,
                );
                let (sender, receiver) = std::sync::mpsc::sync_channel::<Vec<u8>>(16);
                std::thread::spawn(move || {
                    let mut file = file;
                    let _ = std::io::copy(&mut file, &mut ChannelWriter(sender));
                });
                Some(receiver)
            }
        };
        let killed = Arc::new(AtomicBool::new(false));
        if let Some(switch) = &command.kill {
            let flag = killed.clone();
            kit::arm(switch, Box::new(move || flag.store(true, Ordering::SeqCst)));
        }
        let mut collector = kit::Collector::new(command.output_limit, on_output);
        let mut push = |channel: u8, data: &[u8]| {
            let stream = if channel == 1 {
                Stream::Stdout
            } else {
                Stream::Stderr
            };
            collector.push(stream, data);
        };
        let timeout_at = started + command.timeout;
        let stop = || {
            killed.load(Ordering::SeqCst)
                || self.cancelled.load(Ordering::SeqCst)
                || Instant::now() >= timeout_at
        };
        let mut on_stop = || self.stop_file(id.clone());
        let end = self.client.exec(
            &self.pod,
            &argv,
            &mut ExecIo {
                stdin,
                on_output: &mut push,
                deadline: started + command.timeout + GRACE,
                stop: &stop,
                on_stop: &mut on_stop,
            },
        );
        if let Some(switch) = &command.kill {
            kit::disarm(switch);
        }
        let end = end.map_err(|e| self.exec_error(e))?;
        let (stdout, stderr, truncated) = collector.finish();
        let duration = started.elapsed();
        let (exit_code, signal) = match end {
            ExecEnd::Exited(code) if (129..=192).contains(&code) => (None, Some(code - 128)),
            ExecEnd::Exited(code) => (Some(code), None),
            ExecEnd::DeadlinePassed => {
                self.stop_file(id);
                (None, Some(9))
            }
            ExecEnd::Failed(message) | ExecEnd::Dropped(message) => {
                return Err(self.lost_or(message));
            }
        };
        let mut host = self.host.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(known) = host.as_mut() {
            self.sync_back(known)?;
        }
        drop(host);
        let timed_out = signal == Some(9) && duration >= command.timeout;
        if killed.load(Ordering::SeqCst) && !timed_out {
            return Ok(kit::killed_output(stdout, stderr, truncated, duration));
        }
        if self.cancelled.load(Ordering::SeqCst) && !timed_out && signal == Some(9) {
            return Ok(kit::cancelled_output(stdout, stderr, truncated, duration));
        }
        Ok(CommandOutput {
            exit_code,
            signal,
            stdout,
            stderr,
            truncated,
            timed_out,
            duration,
            egress_connections: 0,
        })
    }

    fn cancel(&self) {
        if !self.cancelled.swap(true, Ordering::SeqCst) {
            self.stop_file("all".into());
        }
    }

    fn close(self: Box<Self>) -> Result<(), SandboxError> {
        // No heartbeat after the claim is gone.
        self.alive
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let deleted = self.client.delete_claim(&self.claim);
        let removed = warden_sandbox::remove_scratch(&self.scratch);
        deleted.map_err(|e| {
            io_error(
                &format!("cannot delete claim {}", self.claim),
                std::io::Error::other(e.to_string()),
            )
        })?;
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expiry_is_whole_seconds_ahead() {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let text = expiry(Duration::from_secs(600));
        assert!(text.ends_with('Z') && !text.contains('.'), "{text}");
        let at = warden_time::parse_rfc3339(&text).unwrap() / 1000;
        let at = u64::try_from(at).unwrap();
        assert!((now + 599..=now + 601).contains(&at), "{text}");
    }

    #[test]
    fn paths_from_the_pod_stay_inside() {
        assert!(confined("src/lib.rs").is_ok());
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "./a"] {
            assert!(confined(bad).is_err(), "{bad}");
        }
    }
}
