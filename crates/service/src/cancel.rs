//! Stopping a run from outside its worker. Whoever ends a task while a run of it is in flight
//! (the cancel route) sets the task's status first, then signals the run: at once when it runs
//! in this process ([`RunningTasks::stop`]); runs of other processes (a `warden worker` on a
//! shared Postgres) see the terminal status within about a second ([`watch_status`]). A
//! stopped run's agent loop is cancelled, the commands running in its sandbox are killed
//! ([`RunControl::on_stop`] hooks), and the run ends without touching the task, whose status
//! and result the canceller already set.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use warden_protocol::TaskId;
use warden_runtime::CancelFlag;
use warden_store::Store;

/// How often a run looks at its task's status.
pub const STATUS_CHECK_EVERY: Duration = Duration::from_secs(1);

type Hook = Box<dyn Fn() + Send + Sync>;

/// One run's switch.
pub struct RunControl {
    cancel: CancelFlag,
    stopped: AtomicBool,
    wake: Notify,
    hooks: Mutex<Vec<Hook>>,
}

impl RunControl {
    fn new(cancel: CancelFlag) -> RunControl {
        RunControl {
            cancel,
            stopped: AtomicBool::new(false),
            wake: Notify::new(),
            hooks: Mutex::new(Vec::new()),
        }
    }

    /// Stops the run: cancels its agent loop and runs the hooks (once each).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.cancel.cancel();
        let hooks = std::mem::take(&mut *self.hooks.lock().unwrap_or_else(PoisonError::into_inner));
        for hook in hooks {
            hook();
        }
        self.wake.notify_one();
    }

    /// Whether the task was ended from outside the run.
    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Resolves `grace` after the run was stopped (never, if it is not).
    pub async fn stopped_for(&self, grace: Duration) {
        while !self.stopped() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(grace).await;
    }

    /// Runs `hook` when the run is stopped, or now if it already is.
    pub fn on_stop(&self, hook: impl Fn() + Send + Sync + 'static) {
        let mut hooks = self.hooks.lock().unwrap_or_else(PoisonError::into_inner);
        // Checked under the lock `stop` takes after setting the flag: a hook is never missed.
        if self.stopped() {
            drop(hooks);
            hook();
        } else {
            hooks.push(Box::new(hook));
        }
    }
}

/// The runs of this process, by task.
#[derive(Default)]
pub struct RunningTasks {
    runs: Mutex<HashMap<TaskId, Arc<RunControl>>>,
}

/// A registered run; dropping it deregisters the run.
pub struct Registration {
    registry: Arc<RunningTasks>,
    task: TaskId,
    control: Arc<RunControl>,
}

impl Registration {
    pub fn control(&self) -> &Arc<RunControl> {
        &self.control
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut runs = self.registry.lock();
        if runs
            .get(&self.task)
            .is_some_and(|c| Arc::ptr_eq(c, &self.control))
        {
            runs.remove(&self.task);
        }
    }
}

impl RunningTasks {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TaskId, Arc<RunControl>>> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers the run of `task` that `cancel` stops.
    pub fn register(self: &Arc<Self>, task: &TaskId, cancel: CancelFlag) -> Registration {
        let control = Arc::new(RunControl::new(cancel));
        self.lock().insert(task.clone(), Arc::clone(&control));
        Registration {
            registry: Arc::clone(self),
            task: task.clone(),
            control,
        }
    }

    /// The run of `task` in this process, if there is one.
    pub fn control(&self, task: &TaskId) -> Option<Arc<RunControl>> {
        self.lock().get(task).cloned()
    }

    /// Stops the run of `task` if it runs in this process; `true` when it did.
    pub fn stop(&self, task: &TaskId) -> bool {
        match self.control(task) {
            Some(control) => {
                control.stop();
                true
            }
            None => false,
        }
    }

    /// Whether the run of `task` in this process was stopped from outside.
    pub fn stopped(&self, task: &TaskId) -> bool {
        self.control(task).is_some_and(|c| c.stopped())
    }
}

/// Stops the run when its task ends from outside (checked every `every`), or returns once the
/// run was stopped otherwise. Abort it when the run ends.
pub async fn watch_status(
    store: Arc<dyn Store>,
    task: TaskId,
    control: Arc<RunControl>,
    every: Duration,
) {
    loop {
        tokio::select! {
            _ = control.wake.notified() => {}
            _ = tokio::time::sleep(every) => {}
        }
        if control.stopped() {
            return;
        }
        match store.get_task(&task).await {
            Ok(Some(current)) if !current.status.is_terminal() => {}
            Ok(Some(_)) | Ok(None) => {
                tracing::info!(%task, "the task ended outside its run; stopping the run");
                control.stop();
                return;
            }
            Err(error) => tracing::debug!(%task, %error, "status check failed; retrying"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn stopping_cancels_runs_hooks_once_and_late_hooks_at_once() {
        let registry = Arc::new(RunningTasks::default());
        let task: TaskId = "tsk_01M8VBQV37BCXJMMGC5Y911WEV".parse().unwrap();
        let cancel = CancelFlag::default();
        let registration = registry.register(&task, cancel.clone());
        let calls = Arc::new(AtomicU32::new(0));
        let counter = Arc::clone(&calls);
        registration.control().on_stop(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        assert!(!registry.stopped(&task));
        assert!(registry.stop(&task));
        assert!(registry.stop(&task));
        assert!(cancel.is_cancelled() && registry.stopped(&task));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let counter = Arc::clone(&calls);
        registration.control().on_stop(move || {
            counter.fetch_add(10, Ordering::SeqCst);
        });
        assert_eq!(calls.load(Ordering::SeqCst), 11);
        drop(registration);
        assert!(!registry.stop(&task), "deregistered with its guard");
    }
}
