//! Task ids: `tsk_` + a ULID (48-bit millisecond time, 80 random bits, Crockford base32). Ids
//! sort by creation time, and within one process strictly by creation order: an id made in the
//! same millisecond as the previous one is the previous one plus one (a monotonic ULID), so a
//! list ordered by id is the order tasks were submitted in.

use std::sync::Mutex;

use warden_protocol::TaskId;

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// The last ULID this process handed out.
static LAST: Mutex<u128> = Mutex::new(0);

/// No id could be made (no randomness from the operating system).
#[derive(Debug, thiserror::Error)]
#[error("cannot make a task id: {0}")]
pub struct IdError(String);

/// A new task id for the current time.
pub fn new_task_id() -> Result<TaskId, IdError> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    new_task_id_at(now_ms)
}

/// A new task id for `now_ms`, after every id this process made before.
pub fn new_task_id_at(now_ms: u64) -> Result<TaskId, IdError> {
    let mut random = [0u8; 10];
    getrandom::fill(&mut random).map_err(|e| IdError(format!("no randomness available: {e}")))?;
    let mut fresh: u128 = u128::from(now_ms & 0xFFFF_FFFF_FFFF) << 80;
    for (index, byte) in random.iter().enumerate() {
        fresh |= u128::from(*byte) << (8 * (9 - index));
    }
    let value = {
        let mut last = LAST.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // Same millisecond (or a clock that stepped back): one more than the previous id.
        let value = if fresh > *last {
            fresh
        } else {
            last.wrapping_add(1)
        };
        *last = value;
        value
    };
    let mut text = String::with_capacity(26);
    for index in 0..26 {
        let shift = 5 * (25 - index);
        text.push(char::from(CROCKFORD[((value >> shift) & 0x1F) as usize]));
    }
    TaskId::from_ulid(&text).map_err(|e| IdError(e.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_sort_by_time_and_by_creation_order_within_a_millisecond() {
        let a = new_task_id_at(1_700_000_000_000).unwrap();
        let b = new_task_id_at(1_700_000_000_001).unwrap();
        assert!(a < b, "{a} < {b}");
        let mut previous = new_task_id().unwrap();
        for _ in 0..1000 {
            let next = new_task_id().unwrap();
            assert!(previous < next, "{previous} < {next}");
            previous = next;
        }
        // A clock that steps back still yields increasing ids.
        let late = new_task_id_at(1_900_000_000_000).unwrap();
        let early = new_task_id_at(1_800_000_000_000).unwrap();
        assert!(late < early, "{late} < {early}");
    }
}
