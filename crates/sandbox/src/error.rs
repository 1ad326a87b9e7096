//! The sandbox crate's error type. A command that fails (non-zero exit, a signal, a timeout) is
//! *not* an error: it is a [`crate::CommandOutput`]. Errors mean isolation could not be
//! established, the request was malformed, or the host failed.

use crate::{Backend, Layer};

/// Why a sandbox could not be selected, opened, or could not run a command.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A layer of the requested isolation cannot be established. Nothing ran (fail closed);
    /// callers report this as the `sandbox_error` failure code.
    #[error("{backend} sandbox unavailable: layer {layer} cannot be established: {reason}")]
    Unavailable {
        /// The backend that was requested.
        backend: Backend,
        /// The first layer that failed.
        layer: Layer,
        /// What failed and, where known, what to do about it.
        reason: String,
    },
    /// The view or command specification is malformed (empty argv, a `cwd` leaving the working
    /// root, an environment name with `=`, a relative snapshot path, …).
    #[error("invalid sandbox request: {0}")]
    InvalidRequest(String),
    /// The sandbox configuration is invalid (e.g. disabling a layer that cannot be disabled).
    #[error("invalid sandbox configuration: {0}")]
    InvalidConfig(String),
    /// A remote sandbox went away while in use (its pod was deleted or evicted, its claim
    /// expired): the view cannot run anything any more. Callers end the run with
    /// `sandbox_error` rather than letting the agent retry into it; a new run opens a new view.
    #[error("{backend} sandbox lost: {reason}")]
    Lost {
        /// The backend whose sandbox was lost.
        backend: Backend,
        /// What was seen (the pod gone, the stream dropped, the claim expired).
        reason: String,
    },
    /// A host-side operation failed (scratch directory, pipes, waiting for a process).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl SandboxError {
    /// Whether trying again may help (host I/O hiccups); an unavailable layer or an invalid
    /// request will fail the same way again.
    pub fn is_retryable(&self) -> bool {
        match self {
            SandboxError::Io { .. } | SandboxError::Lost { .. } => true,
            SandboxError::Unavailable { .. }
            | SandboxError::InvalidRequest(_)
            | SandboxError::InvalidConfig(_) => false,
        }
    }

    /// The layer that failed, for an [`SandboxError::Unavailable`] error.
    pub fn layer(&self) -> Option<Layer> {
        match self {
            SandboxError::Unavailable { layer, .. } => Some(*layer),
            SandboxError::InvalidRequest(_)
            | SandboxError::InvalidConfig(_)
            | SandboxError::Io { .. }
            | SandboxError::Lost { .. } => None,
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> SandboxError {
        SandboxError::Io {
            context: context.into(),
            source,
        }
    }
}
