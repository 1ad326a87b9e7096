//! Task ids: `tsk_` + a ULID (48-bit millisecond time, 80 random bits, Crockford base32), so ids
//! sort by creation time.

use warden_protocol::TaskId;

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// A new task id for the given time.
pub fn new_task_id(now_ms: u64) -> anyhow::Result<TaskId> {
    let mut random = [0u8; 10];
    getrandom::fill(&mut random).map_err(|e| anyhow::anyhow!("no randomness available: {e}"))?;
    let mut value: u128 = u128::from(now_ms & 0xFFFF_FFFF_FFFF) << 80;
    for (index, byte) in random.iter().enumerate() {
        value |= u128::from(*byte) << (8 * (9 - index));
    }
    let mut text = [0u8; 26];
    for (index, slot) in text.iter_mut().enumerate() {
        let shift = 5 * (25 - index);
        *slot = CROCKFORD[((value >> shift) & 0x1F) as usize];
    }
    let ulid = String::from_utf8_lossy(&text).into_owned();
    Ok(TaskId::from_ulid(&ulid)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_valid_and_sort_by_time() {
        let a = new_task_id(1_700_000_000_000).unwrap();
        let b = new_task_id(1_700_000_000_001).unwrap();
        assert!(a < b, "{a} < {b}");
        assert_ne!(new_task_id(5).unwrap(), new_task_id(5).unwrap());
    }
}
