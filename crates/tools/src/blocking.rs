//! Runs a tool's filesystem work on its own thread and awaits it, so a large read or search never
//! stalls the async executor that drives the agent loop. Executor-agnostic: no runtime is needed.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

/// Runs `work` on a new thread; the future resolves to its value, or to `None` if it panicked.
/// When no thread can be spawned the work runs inline instead.
pub(crate) fn run<T, F>(work: F) -> impl Future<Output = Option<T>> + Send
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let shared = Arc::new(Mutex::new(Shared {
        value: None,
        done: false,
        waker: None,
    }));
    let mut sender = Some(Sender(shared.clone()));
    let work = Arc::new(Mutex::new(Some(work)));
    let spawned = {
        let work = work.clone();
        let sender = sender.take();
        std::thread::Builder::new()
            .name("warden-tool".into())
            .spawn(move || {
                let work = lock(&work).take();
                if let (Some(work), Some(sender)) = (work, sender) {
                    sender.send(work());
                }
            })
    };
    if spawned.is_err() {
        // The closure (and the sender inside it) came back dropped with the error; run here.
        if let Some(work) = lock(&work).take() {
            let value = work();
            let mut state = lock(&shared);
            state.value = Some(value);
            state.done = true;
        }
    }
    Receiver(shared)
}

struct Shared<T> {
    value: Option<T>,
    done: bool,
    waker: Option<Waker>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing panics while holding these locks, but never turn a poisoned lock into a second panic.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Sender<T>(Arc<Mutex<Shared<T>>>);

impl<T> Sender<T> {
    fn send(self, value: T) {
        lock(&self.0).value = Some(value);
        // Drop marks the channel done and wakes the receiver.
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let waker = {
            let mut state = lock(&self.0);
            state.done = true;
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

struct Receiver<T>(Arc<Mutex<Shared<T>>>);

impl<T> Future for Receiver<T> {
    type Output = Option<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut state = lock(&self.0);
        if state.done {
            return Poll::Ready(state.value.take());
        }
        state.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
