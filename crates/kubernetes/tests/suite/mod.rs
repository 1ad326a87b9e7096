//! The suite: the rendered manifests against their golden file, and the backend's lifecycle
//! against the fake API server (claim, bind, exec, sync, expire, lose a pod, reap orphans, a
//! watch that drops).

mod lifecycle;
mod render;
pub mod support;
