//! A fake cluster whose pods are `linux` sandbox views, and the backend configured to use it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use warden_kubernetes::fake::{FakeCluster, FakeOptions};
use warden_kubernetes::{Credentials, KubernetesConfig, KubernetesSandbox};
use warden_sandbox::{Backend, SandboxConfig};

pub struct Cluster {
    pub fake: FakeCluster,
    pub config: KubernetesConfig,
    pub dir: tempfile::TempDir,
}

/// The fake with `linux` pods, or `None` (printed) where the linux backend is unavailable —
/// unless CI requires it (`WARDEN_SANDBOX_TEST_REQUIRE` lists linux).
pub fn cluster(options: FakeOptions) -> Option<Cluster> {
    let runtime = match warden_sandbox::select(Backend::Linux, &SandboxConfig::default()) {
        Ok(runtime) => runtime,
        Err(error) => {
            let required = std::env::var("WARDEN_SANDBOX_TEST_REQUIRE")
                .unwrap_or_default()
                .split(',')
                .any(|b| b.trim() == "linux");
            assert!(!required, "the fake's pods need the linux backend: {error}");
            eprintln!("SKIP: the fake's pods need the linux backend: {error}");
            return None;
        }
    };
    let dir = tempfile::Builder::new()
        .prefix("warden-k8s-test-")
        .tempdir()
        .unwrap();
    let fake = FakeCluster::start(runtime, &dir.path().join("cluster"), options.clone()).unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig).unwrap();
    let config = KubernetesConfig {
        namespace: options.namespace,
        warm_pool: options.warm_pool,
        credentials: Credentials::Kubeconfig {
            path: kubeconfig,
            context: None,
        },
        owner: "test-worker".into(),
        claim_timeout: Duration::from_secs(20),
        ..KubernetesConfig::default()
    };
    Some(Cluster { fake, config, dir })
}

impl Cluster {
    pub fn sandbox(&self) -> Arc<KubernetesSandbox> {
        Arc::new(KubernetesSandbox::connect(&self.config).unwrap())
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// A read-only snapshot like warden-repo's (files 0444, directories 0555).
pub fn snapshot(dir: &Path, files: &[(&str, &str)]) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    for (name, content) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
    }
    dir.to_path_buf()
}
