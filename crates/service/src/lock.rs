//! One `warden serve` per `WARDEN_HOME`: an exclusive `flock` on `WARDEN_HOME/serve.lock`, held
//! for the life of the process (the kernel drops it when the process dies, however it dies). The
//! file holds the holder's pid, for the message a second instance prints.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use rustix::fs::{flock, FlockOperation};

/// The held lock; released when dropped or when the process exits.
#[derive(Debug)]
pub struct HomeLock {
    _file: File,
    pub path: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds the lock.
    #[error("another warden serve (pid {pid}) is using {home}; stop it first or use another WARDEN_HOME")]
    Held { home: PathBuf, pid: String },
    /// The lock file could not be opened or locked.
    #[error("cannot lock {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Takes the lock of `home` without waiting.
pub fn lock_home(home: &Path) -> Result<HomeLock, LockError> {
    let path = home.join("serve.lock");
    let io = |source: std::io::Error| LockError::Io {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(home).map_err(io)?;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io)?;
    match flock(&file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            return Err(LockError::Held {
                home: home.to_path_buf(),
                pid: pid.trim().to_string(),
            });
        }
        Err(errno) => return Err(io(errno.into())),
    }
    file.set_len(0).map_err(io)?;
    file.rewind().map_err(io)?;
    write!(file, "{}", std::process::id()).map_err(io)?;
    file.flush().map_err(io)?;
    Ok(HomeLock { _file: file, path })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_home_is_refused_until_the_first_is_dropped() {
        let home = tempfile::tempdir().unwrap();
        let first = lock_home(home.path()).unwrap();
        match lock_home(home.path()) {
            Err(LockError::Held { pid, .. }) => assert_eq!(pid, std::process::id().to_string()),
            other => panic!("{other:?}"),
        }
        drop(first);
        lock_home(home.path()).unwrap();
    }
}
