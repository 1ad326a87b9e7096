//! Runs a tool's filesystem work on its own thread and awaits it, so a large read or search never
//! stalls the async executor that drives the agent loop. Executor-agnostic: no runtime is needed
//! (the value comes back over a `futures-channel` one-shot, which any executor can await).

use futures_channel::oneshot;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

/// Runs `work` on a new thread; the future resolves to its value, or to `None` if it panicked.
/// When no thread can be spawned the work runs inline instead.
pub(crate) fn run<T, F>(work: F) -> impl Future<Output = Option<T>> + Send
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (sender, receiver) = oneshot::channel();
    let work = Arc::new(Mutex::new(Some(work)));
    let spawned = {
        let work = work.clone();
        std::thread::Builder::new()
            .name("warden-tool".into())
            .spawn(move || {
                let work = lock(&work).take();
                if let Some(work) = work {
                    // A panic drops the sender unsent: the receiver then resolves to `None`. An
                    // error here means the caller stopped waiting: nobody to tell.
                    let _ = sender.send(work());
                }
            })
    };
    // The closure (and the sender inside it) came back dropped with the error; run here.
    let inline = match spawned {
        Ok(_) => None,
        Err(_) => lock(&work).take().map(|work| work()),
    };
    async move {
        match inline {
            Some(value) => Some(value),
            None => receiver.await.ok(),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing panics while holding this lock, but never turn a poisoned lock into a second panic.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::{Context, Poll, Waker};

    pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
        struct ThreadWaker(std::thread::Thread);
        impl std::task::Wake for ThreadWaker {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        let mut future = std::pin::pin!(future);
        loop {
            if let Poll::Ready(value) = future.as_mut().poll(&mut cx) {
                return value;
            }
            std::thread::park();
        }
    }

    #[test]
    fn returns_the_value() {
        assert_eq!(block_on(run(|| 6 * 7)), Some(42));
    }

    #[test]
    fn a_panic_becomes_none() {
        let out: Option<u8> = block_on(run(|| panic!("boom")));
        assert_eq!(out, None);
    }

    #[test]
    fn work_whose_caller_stopped_waiting_still_finishes_and_drops_its_value() {
        struct Dropped(std::sync::mpsc::Sender<()>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                let _ = self.0.send(());
            }
        }
        let (dropped, was_dropped) = std::sync::mpsc::channel();
        let (start, started) = std::sync::mpsc::channel::<()>();
        let future = run(move || {
            let _ = started.recv();
            Dropped(dropped)
        });
        drop(future);
        start.send(()).unwrap();
        // The value went nowhere and was dropped on the worker thread; the worker did not hang.
        was_dropped.recv().unwrap();
    }
}
