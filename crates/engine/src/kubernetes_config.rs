//! `[kubernetes]`: where the `kubernetes` sandbox backend's claims go, the template and warm pool
//! they draw from, the credentials Warden uses, and how long an idle sandbox lives. Resolved
//! into `warden_kubernetes::KubernetesConfig` whatever the backend, so `warden k8s render`
//! prints the manifests before the backend is switched on.

use anyhow::bail;
use std::path::Path;
use std::time::Duration;
use warden_config::KubernetesSection;
use warden_kubernetes::{Credentials, KubernetesConfig};

/// `[kubernetes]`, resolved and checked.
pub fn resolve(
    section: &KubernetesSection,
    home: &Path,
    env: &dyn warden_config::Env,
) -> anyhow::Result<KubernetesConfig> {
    let defaults = KubernetesConfig::default();
    let kubeconfig_path = || {
        let path = section
            .kubeconfig
            .clone()
            .or_else(|| {
                env.var("KUBECONFIG")
                    .and_then(|list| list.split(':').next().map(str::to_string))
            })
            .unwrap_or_else(|| "~/.kube/config".into());
        match path.strip_prefix("~/") {
            Some(rest) => env
                .var("HOME")
                .map(|user_home| Path::new(&user_home).join(rest))
                .unwrap_or_else(|| home.join(rest)),
            None => path.into(),
        }
    };
    let credentials = match (section.credentials.as_deref(), &section.kubeconfig) {
        (None, None) | (Some("in-cluster"), None) => Credentials::InCluster,
        (Some("in-cluster"), Some(_)) => {
            bail!("kubernetes.kubeconfig is set but kubernetes.credentials is \"in-cluster\"")
        }
        (None, Some(_)) | (Some("kubeconfig"), _) => Credentials::Kubeconfig {
            path: kubeconfig_path(),
            context: section.context.clone(),
        },
        (Some(other), _) => {
            bail!("kubernetes.credentials {other:?}: expected \"in-cluster\" or \"kubeconfig\"")
        }
    };
    if section.context.is_some() && credentials == Credentials::InCluster {
        bail!("kubernetes.context names a kubeconfig context, but the credentials are in-cluster");
    }
    let owner = match &section.owner {
        Some(owner) => owner.clone(),
        None => host_label(env.var("HOSTNAME").as_deref()),
    };
    let config = KubernetesConfig {
        namespace: section.namespace.clone().unwrap_or(defaults.namespace),
        template: section.template.clone().unwrap_or(defaults.template),
        warm_pool: section.warm_pool.clone().unwrap_or(defaults.warm_pool),
        warm_pool_replicas: section
            .warm_pool_replicas
            .unwrap_or(defaults.warm_pool_replicas),
        image: section.image.clone().unwrap_or(defaults.image),
        runtime_class: section
            .runtime_class
            .clone()
            .unwrap_or(defaults.runtime_class),
        cpu_millis: section.cpu_millis.unwrap_or(defaults.cpu_millis),
        credentials,
        idle_timeout: section
            .idle_timeout_secs
            .map_or(defaults.idle_timeout, Duration::from_secs),
        claim_timeout: section
            .claim_timeout_secs
            .map_or(defaults.claim_timeout, Duration::from_secs),
        service_account: section
            .service_account
            .clone()
            .unwrap_or(defaults.service_account),
        warden_namespace: section
            .warden_namespace
            .clone()
            .unwrap_or(defaults.warden_namespace),
        egress_proxy_port: section.egress_proxy_port,
        owner,
    };
    if config.egress_proxy_port == Some(0) {
        bail!("kubernetes.egress_proxy_port must be a port, 1-65535");
    }
    config.validate().map_err(anyhow::Error::msg)?;
    Ok(config)
}

/// The host name as a label value (a pod's name in a cluster), `warden` without one.
fn host_label(host: Option<&str>) -> String {
    let cleaned: String = host
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    let trimmed = cleaned.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if trimmed.is_empty() {
        "warden".into()
    } else {
        trimmed.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Vars(Vec<(&'static str, &'static str)>);

    impl warden_config::Env for Vars {
        fn var(&self, name: &str) -> Option<String> {
            self.0
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.to_string())
        }
    }

    fn resolve_toml(text: &str, vars: Vars) -> anyhow::Result<KubernetesConfig> {
        let section: KubernetesSection = toml::from_str(text)?;
        resolve(&section, Path::new("/home/warden"), &vars)
    }

    #[test]
    fn defaults_are_in_cluster() {
        let config = resolve_toml("", Vars(vec![("HOSTNAME", "warden-worker-7d9f")])).unwrap();
        assert_eq!(config.credentials, Credentials::InCluster);
        assert_eq!(config.owner, "warden-worker-7d9f");
        assert_eq!(config.namespace, "warden-sandboxes");
        assert_eq!(config.idle_timeout, Duration::from_secs(600));
    }

    #[test]
    fn a_kubeconfig_is_found_and_named() {
        let config = resolve_toml(
            "kubeconfig = \"~/kube.yaml\"\ncontext = \"kind-warden\"\n",
            Vars(vec![("HOME", "/home/u")]),
        )
        .unwrap();
        assert_eq!(
            config.credentials,
            Credentials::Kubeconfig {
                path: "/home/u/kube.yaml".into(),
                context: Some("kind-warden".into())
            }
        );
        let config = resolve_toml(
            "credentials = \"kubeconfig\"\n",
            Vars(vec![("KUBECONFIG", "/a/one:/a/two")]),
        )
        .unwrap();
        assert_eq!(
            config.credentials,
            Credentials::Kubeconfig {
                path: "/a/one".into(),
                context: None
            }
        );
    }

    #[test]
    fn wrong_values_are_named() {
        for (text, words) in [
            ("namespace = \"Bad_NS\"", "kubernetes.namespace"),
            ("credentials = \"magic\"", "kubernetes.credentials"),
            ("context = \"x\"", "kubernetes.context"),
            ("idle_timeout_secs = 5", "idle_timeout_secs"),
            ("owner = \"-x\"", "kubernetes.owner"),
            ("egress_proxy_port = 0", "egress_proxy_port"),
            ("nonsense = 1", "unknown field"),
        ] {
            let error = format!("{:#}", resolve_toml(text, Vars(vec![])).unwrap_err());
            assert!(error.contains(words), "{text}: {error}");
        }
    }

    #[test]
    fn host_names_become_label_values() {
        assert_eq!(host_label(None), "warden");
        assert_eq!(host_label(Some("worker-1.example")), "worker-1.example");
        assert_eq!(host_label(Some("__")), "warden");
    }
}
