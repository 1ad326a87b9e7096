//! The `gvisor` backend (placeholder while the linux backend lands).

use crate::{
    Backend, Layer, LayerReport, Sandbox, SandboxConfig, SandboxError, SandboxView, ViewSpec,
};

pub(crate) struct GvisorSandbox;

impl GvisorSandbox {
    pub(crate) fn establish(_config: &SandboxConfig) -> Result<GvisorSandbox, SandboxError> {
        Err(SandboxError::Unavailable {
            backend: Backend::Gvisor,
            layer: Layer::Runtime,
            reason: "not implemented yet".into(),
        })
    }
}

impl Sandbox for GvisorSandbox {
    fn backend(&self) -> Backend {
        Backend::Gvisor
    }
    fn open(&self, _view: &ViewSpec) -> Result<Box<dyn SandboxView>, SandboxError> {
        unreachable!()
    }
}

pub(crate) fn probe(_config: &SandboxConfig) -> Vec<LayerReport> {
    vec![LayerReport {
        backend: Backend::Gvisor,
        layer: Layer::Runtime,
        available: false,
        detail: "not implemented yet".into(),
    }]
}
