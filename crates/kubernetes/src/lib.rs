//! Warden's `kubernetes` sandbox backend, built on kubernetes-sigs/agent-sandbox (v1beta1).
//!
//! A task's view is a `SandboxClaim` on a `SandboxWarmPool` of gVisor pods made from a
//! `SandboxTemplate`; `warden k8s render` prints those objects ([`render`]).
//!
//! The backend implements `warden_sandbox::Sandbox` like the local backends do, so the rest of
//! Warden does not know where a command runs.

#![warn(unreachable_pub)]
mod backend;
mod client;
mod config;
mod error;
#[cfg(feature = "fake")]
pub mod fake;
mod http;
mod kubeconfig;
mod names;
mod render;
mod tar;
mod websocket;
mod yaml;

pub use backend::{ClaimSummary, KubernetesSandbox};
pub use config::{Credentials, KubernetesConfig};
pub use error::ClientError;
pub use render::{manifests, render, PodResources, CONTAINER, POD_WORKING_ROOT};
