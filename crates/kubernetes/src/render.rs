//! What an operator applies for the kubernetes backend (`warden k8s render`): the gVisor
//! `RuntimeClass`, the sandboxes' namespace (Pod Security `restricted`), Warden's service
//! account with a Role that can claim sandboxes and exec into their pods in that one
//! namespace, the `SandboxTemplate` and the `SandboxWarmPool`.
//!
//! Every manifest is built here as JSON and printed as YAML; CI checks the output against the
//! built-in kinds' schemas (`kubernetes-validate --strict`) and the agent-sandbox CRDs' own
//! `openAPIV3Schema` with unknown fields refused (`.ci/kubernetes.sh`).

use crate::names::MANAGED_BY;
use crate::KubernetesConfig;
use serde_json::{json, Value};

/// The agent-sandbox API group of `Sandbox`.
pub(crate) const SANDBOX_GROUP: &str = "agents.x-k8s.io";
/// The agent-sandbox API group of `SandboxTemplate`, `SandboxClaim`, `SandboxWarmPool`.
pub(crate) const EXTENSIONS_GROUP: &str = "extensions.agents.x-k8s.io";
/// The one version served by agent-sandbox v1.0.
pub(crate) const VERSION: &str = "v1beta1";
/// The sandbox container's name in the template (exec targets it).
pub const CONTAINER: &str = "sandbox";
/// Where the working root is in a pod: an `emptyDir` of the template.
pub const POD_WORKING_ROOT: &str = warden_sandbox::WORKING_ROOT;
/// The uid and gid commands run as in a pod (the `sandbox` user of the other backends).
const SANDBOX_UID: u64 = 1000;

/// What `[sandbox]` says about one sandbox's resources, for the template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodResources {
    /// Memory of the sandbox container (`[sandbox] memory_mib`).
    pub memory_bytes: u64,
    /// Writable space of the working root and `/tmp` together (`[sandbox] disk_mib`).
    pub disk_bytes: u64,
}

/// Every manifest, in the order they apply.
pub fn manifests(config: &KubernetesConfig, resources: &PodResources) -> Vec<Value> {
    vec![
        runtime_class(config),
        namespace(config),
        service_account(config),
        role(config),
        role_binding(config),
        sandbox_template(config, resources),
        warm_pool(config),
    ]
}

/// The manifests as one YAML stream (what `warden k8s render` prints).
pub fn render(config: &KubernetesConfig, resources: &PodResources) -> String {
    let mut out = String::from(
        "# Rendered by `warden k8s render` from Warden's [kubernetes] and [sandbox] settings.\n\
         # Needs agent-sandbox v1beta1 (with its extensions) and gVisor on the nodes.\n",
    );
    out.push_str(&crate::yaml::documents(&manifests(config, resources)));
    out
}

fn labels() -> Value {
    json!({ MANAGED_BY.0: MANAGED_BY.1, "app.kubernetes.io/part-of": "warden" })
}

fn runtime_class(config: &KubernetesConfig) -> Value {
    json!({
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": config.runtime_class, "labels": labels()},
        "handler": "runsc",
    })
}

fn namespace(config: &KubernetesConfig) -> Value {
    let mut labels = labels();
    if let Some(map) = labels.as_object_mut() {
        for mode in ["enforce", "audit", "warn"] {
            map.insert(
                format!("pod-security.kubernetes.io/{mode}"),
                json!("restricted"),
            );
        }
    }
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": config.namespace, "labels": labels},
    })
}

fn service_account(config: &KubernetesConfig) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": config.service_account,
            "namespace": config.warden_namespace,
            "labels": labels(),
        },
    })
}

/// Least privilege: claims (create, read, watch, extend, delete), the sandboxes they bind (read),
/// exec into pods (`create`; `get` too, which the WebSocket upgrade of older API servers is
/// authorized as) — in the sandboxes' namespace only. No pods, secrets or anything else.
fn role(config: &KubernetesConfig) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {
            "name": "warden-sandboxes",
            "namespace": config.namespace,
            "labels": labels(),
        },
        "rules": [
            {
                "apiGroups": [EXTENSIONS_GROUP],
                "resources": ["sandboxclaims"],
                "verbs": ["create", "get", "list", "watch", "patch", "delete"],
            },
            {
                "apiGroups": [SANDBOX_GROUP],
                "resources": ["sandboxes"],
                "verbs": ["get"],
            },
            {
                "apiGroups": [""],
                "resources": ["pods/exec"],
                "verbs": ["create", "get"],
            },
        ],
    })
}

fn role_binding(config: &KubernetesConfig) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": "warden-sandboxes",
            "namespace": config.namespace,
            "labels": labels(),
        },
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "warden-sandboxes",
        },
        "subjects": [{
            "kind": "ServiceAccount",
            "name": config.service_account,
            "namespace": config.warden_namespace,
        }],
    })
}

/// A Kubernetes quantity in mebibytes, rounded up.
fn mebibytes(bytes: u64) -> String {
    format!("{}Mi", bytes.div_ceil(1 << 20).max(1))
}

fn sandbox_template(config: &KubernetesConfig, resources: &PodResources) -> Value {
    let memory = mebibytes(resources.memory_bytes);
    let disk = mebibytes(resources.disk_bytes);
    let cpu = format!("{}m", config.cpu_millis);
    // Only Warden's egress proxy, when prepare may use it (and DNS to find it).
    let egress = match config.egress_proxy_port {
        None => json!([]),
        Some(port) => json!([
            {
                "to": [{
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": config.warden_namespace}},
                    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "warden"}},
                }],
                "ports": [{"port": port, "protocol": "TCP"}],
            },
            {
                "to": [{
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                }],
                "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
            },
        ]),
    };
    json!({
        "apiVersion": format!("{EXTENSIONS_GROUP}/{VERSION}"),
        "kind": "SandboxTemplate",
        "metadata": {"name": config.template, "namespace": config.namespace, "labels": labels()},
        "spec": {
            "podTemplate": {
                "metadata": {"labels": {"app.kubernetes.io/name": "warden-sandbox", MANAGED_BY.0: MANAGED_BY.1}},
                "spec": {
                    "runtimeClassName": config.runtime_class,
                    "automountServiceAccountToken": false,
                    "enableServiceLinks": false,
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": SANDBOX_UID,
                        "runAsGroup": SANDBOX_UID,
                        "fsGroup": SANDBOX_UID,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [{
                        "name": CONTAINER,
                        "image": config.image,
                        "imagePullPolicy": "IfNotPresent",
                        // Idles until deleted; every command arrives over exec.
                        "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"],
                        "workingDir": POD_WORKING_ROOT,
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "privileged": false,
                            "readOnlyRootFilesystem": true,
                            "runAsNonRoot": true,
                            "capabilities": {"drop": ["ALL"]},
                        },
                        "resources": {
                            "requests": {"cpu": cpu, "memory": memory, "ephemeral-storage": disk},
                            "limits": {"cpu": cpu, "memory": memory, "ephemeral-storage": disk},
                        },
                        "volumeMounts": [
                            {"name": "work", "mountPath": POD_WORKING_ROOT},
                            {"name": "tmp", "mountPath": "/tmp"},
                        ],
                    }],
                    "volumes": [
                        {"name": "work", "emptyDir": {"sizeLimit": disk}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": disk}},
                    ],
                },
            },
            "networkPolicyManagement": "Managed",
            "networkPolicy": {"ingress": [], "egress": egress},
            // A claim with `env` would force a cold start; Warden sends none, and none may.
            "envVarsInjectionPolicy": "Disallowed",
        },
    })
}

fn warm_pool(config: &KubernetesConfig) -> Value {
    json!({
        "apiVersion": format!("{EXTENSIONS_GROUP}/{VERSION}"),
        "kind": "SandboxWarmPool",
        "metadata": {"name": config.warm_pool, "namespace": config.namespace, "labels": labels()},
        "spec": {
            "replicas": config.warm_pool_replicas,
            "sandboxTemplateRef": {"name": config.template},
            // A changed template replaces the idle pods at once; claimed ones are never touched.
            "updateStrategy": {"type": "Recreate"},
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_round_up_to_mebibytes() {
        assert_eq!(mebibytes(1), "1Mi");
        assert_eq!(mebibytes(1 << 20), "1Mi");
        assert_eq!(mebibytes((1 << 20) + 1), "2Mi");
        assert_eq!(mebibytes(2 << 30), "2048Mi");
    }

    #[test]
    fn egress_is_denied_unless_a_proxy_port_is_named() {
        let resources = PodResources {
            memory_bytes: 1 << 30,
            disk_bytes: 1 << 30,
        };
        let closed = sandbox_template(&KubernetesConfig::default(), &resources);
        assert_eq!(closed["spec"]["networkPolicy"]["egress"], json!([]));
        assert_eq!(closed["spec"]["networkPolicy"]["ingress"], json!([]));
        let open = sandbox_template(
            &KubernetesConfig {
                egress_proxy_port: Some(3128),
                ..KubernetesConfig::default()
            },
            &resources,
        );
        let rules = open["spec"]["networkPolicy"]["egress"].as_array().unwrap();
        assert_eq!(rules[0]["ports"][0]["port"], 3128);
        assert_eq!(rules.len(), 2);
    }
}
