//! What a backend implemented outside this crate (`warden-kubernetes`) needs to behave like the
//! ones inside: the same checks of views and commands, the same bounded output, the same copy of
//! a snapshot into a writable tree, the same outputs for a cancelled or killed command. One copy
//! of each, so a remote backend refuses, truncates and reports exactly as the local ones do.

use crate::{CommandOutput, CommandSpec, SandboxError, ViewSpec};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use crate::output::{truncation_marker, Collector};
pub use crate::spec::ValidatedView;

/// Checks a view's snapshots, names, mounts and egress proxy; canonical snapshot paths.
pub fn validate_view(view: &ViewSpec) -> Result<ValidatedView, SandboxError> {
    crate::spec::validate_view(view)
}

/// Checks [`ViewSpec::seed`] (writable single-repository views only); its canonical path.
pub fn validate_seed(view: &ViewSpec) -> Result<Option<PathBuf>, SandboxError> {
    crate::spec::validate_seed(view)
}

/// Checks a command; its working directory relative to the working root, normalized.
pub fn validate_command(command: &CommandSpec) -> Result<String, SandboxError> {
    crate::spec::validate_command(command)
}

/// Creates the scratch directory (private) or checks that it is empty.
pub fn prepare_scratch(dir: &Path) -> Result<(), SandboxError> {
    crate::spec::prepare_scratch(dir)
}

/// Copies a tree into a writable plain directory (owner-writable modes), over what `to`
/// already holds (a seed copied first).
pub fn copy_tree(from: &Path, to: &Path) -> Result<(), SandboxError> {
    crate::local::copy_tree(from, to)
}

/// What a command killed or refused because its view was cancelled returns.
pub fn cancelled_output(
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    truncated: bool,
    duration: Duration,
) -> CommandOutput {
    crate::cancel::cancelled_output(stdout, stderr, truncated, duration)
}

/// What a command stopped through its [`crate::KillSwitch`] returns.
pub fn killed_output(
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    truncated: bool,
    duration: Duration,
) -> CommandOutput {
    crate::spec::killed_output(stdout, stderr, truncated, duration)
}

/// Lets a backend outside this crate register how to kill a command on a
/// [`crate::KillSwitch`] (called at once when the switch already fired); disarm it when the
/// command ended.
pub fn arm(switch: &crate::KillSwitch, target: Box<dyn Fn() + Send>) {
    switch.arm(target);
}

/// Undoes [`arm`].
pub fn disarm(switch: &crate::KillSwitch) {
    switch.disarm();
}
