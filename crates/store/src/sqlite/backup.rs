//! Online backups of a SQLite store: `VACUUM INTO` over a read-only connection writes a
//! consistent snapshot of the database while other connections (a running `warden serve`)
//! keep writing it, and the copy is checked before it is reported.

use std::path::Path;

/// Copies the SQLite database `from` to the new file `to` as one consistent snapshot and
/// checks the copy (`PRAGMA quick_check`); returns its size in bytes.
pub fn backup_sqlite(from: &Path, to: &Path) -> std::io::Result<u64> {
    use rusqlite::OpenFlags;
    let failed =
        |what: String| move |e: rusqlite::Error| std::io::Error::other(format!("{what}: {e}"));
    let connection = rusqlite::Connection::open_with_flags(
        from,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(failed(format!("cannot open {}", from.display())))?;
    connection
        .busy_timeout(std::time::Duration::from_secs(30))
        .map_err(failed("cannot set a busy timeout".into()))?;
    let target = to
        .to_str()
        .ok_or_else(|| std::io::Error::other(format!("{} is not valid UTF-8", to.display())))?;
    connection
        .execute("VACUUM INTO ?1", [target])
        .map_err(failed(format!(
            "cannot back up {} into {}",
            from.display(),
            to.display()
        )))?;
    let copy = rusqlite::Connection::open_with_flags(to, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(failed(format!("cannot open the backup {}", to.display())))?;
    let check: String = copy
        .query_row("PRAGMA quick_check", [], |row| row.get(0))
        .map_err(failed(format!("cannot check the backup {}", to.display())))?;
    if check != "ok" {
        return Err(std::io::Error::other(format!(
            "the backup {} fails its check: {check}",
            to.display()
        )));
    }
    Ok(std::fs::metadata(to)?.len())
}
