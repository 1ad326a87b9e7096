//! Shared fixtures: temp directory trees as snapshots, and a way to call a tool by name.

mod list_dir;
mod read_file;
mod search;
mod shell;
mod specs;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use warden_runtime::ToolOutput;
use warden_tools::{question_tools, Workspace};

/// Writes `files` (path, contents) under `root`, creating directories.
pub fn write_tree(root: &Path, files: &[(&str, &str)]) {
    for (path, contents) in files {
        write(root, path, contents.as_bytes());
    }
}

pub fn write(root: &Path, path: &str, contents: &[u8]) {
    let full = root.join(path);
    std::fs::create_dir_all(full.parent().unwrap()).unwrap();
    std::fs::write(full, contents).unwrap();
}

/// A temp directory holding `files`.
pub fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_tree(dir.path(), files);
    dir
}

pub fn single(root: &Path) -> Arc<Workspace> {
    Arc::new(Workspace::new(vec![("app".into(), root.to_path_buf())]).unwrap())
}

pub fn multi(repos: &[(&str, &Path)]) -> Arc<Workspace> {
    let repos: Vec<(String, PathBuf)> = repos
        .iter()
        .map(|(name, root)| (name.to_string(), root.to_path_buf()))
        .collect();
    Arc::new(Workspace::new(repos).unwrap())
}

/// Calls the tool named `name` with `arguments`.
pub fn call(workspace: &Arc<Workspace>, name: &str, arguments: serde_json::Value) -> ToolOutput {
    let tools = question_tools(workspace.clone());
    let tool = tools
        .iter()
        .find(|t| t.spec().name == name)
        .unwrap_or_else(|| panic!("no tool {name}"));
    block_on(tool.call(arguments))
}

/// The text of an `Ok` output; panics with the output otherwise.
pub fn ok(output: ToolOutput) -> String {
    match output {
        ToolOutput::Ok(text) => text,
        other => panic!("expected Ok, got {other:?}"),
    }
}

/// The message of an `Error` output; panics with the output otherwise.
pub fn error(output: ToolOutput) -> String {
    match output {
        ToolOutput::Error(message) => message,
        other => panic!("expected Error, got {other:?}"),
    }
}

pub fn block_on<F: Future>(future: F) -> F::Output {
    struct ThreadWaker(std::thread::Thread);
    impl Wake for ThreadWaker {
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

/// Numbered lines `from..=to` as read_file prints them, given each line's text.
pub fn numbered(from: u64, to: u64, text: impl Fn(u64) -> String) -> String {
    (from..=to)
        .map(|n| format!("{n:>6}\t{}", text(n)))
        .collect::<Vec<_>>()
        .join("\n")
}
