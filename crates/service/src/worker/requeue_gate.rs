//! When a worker may re-queue the runs whose leases expired. A lease's expiry is a wall-clock
//! time in the store — the one clock the processes sharing a store have in common — so a step
//! of the wall clock forward (NTP, a VM resume, an operator) makes the lease of every live run
//! look expired until that run's next heartbeat. A worker that sees the wall clock step forward
//! (it moved more than [`STEP_TOLERANCE_MS`] further than the monotonic clock since the last
//! look) re-queues nothing for one lease of monotonic time: every live run on the stepped host
//! heartbeats at least every third of the lease, so each renews its lease first. A dead
//! worker's runs come back a lease later than they would have. A step back needs no hold: leases
//! then look longer, and a dead worker's runs come back later by the step.

use warden_store::Clock;

/// How far the wall clock may drift from the monotonic one between two looks (NTP slews by at
/// most 0.05 %) before it counts as a step.
pub(super) const STEP_TOLERANCE_MS: i64 = 1000;

/// See the module docs.
#[derive(Debug)]
pub(super) struct RequeueGate {
    lease_ms: i64,
    /// The wall and monotonic readings of the last look.
    last: Option<(i64, i64)>,
    /// No re-queueing before this monotonic time.
    held_until: Option<i64>,
}

/// What a look found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Look {
    /// How far the wall clock was stepped since the last look (negative: back), if it was.
    pub stepped_ms: Option<i64>,
    /// Whether expired leases may be re-queued now.
    pub may_requeue: bool,
}

impl RequeueGate {
    pub(super) fn new(lease: std::time::Duration) -> RequeueGate {
        RequeueGate {
            lease_ms: i64::try_from(lease.as_millis()).unwrap_or(i64::MAX),
            last: None,
            held_until: None,
        }
    }

    /// Looks at `clock` (the store's) before re-queueing expired leases.
    pub(super) fn look(&mut self, clock: &dyn Clock) -> Look {
        let (wall, monotonic) = (clock.now_ms(), clock.monotonic_ms());
        let stepped_ms = self.last.and_then(|(last_wall, last_monotonic)| {
            let step = (wall - last_wall) - (monotonic - last_monotonic);
            (step.abs() > STEP_TOLERANCE_MS).then_some(step)
        });
        self.last = Some((wall, monotonic));
        if stepped_ms.is_some_and(|step| step > 0) {
            self.held_until = Some(monotonic.saturating_add(self.lease_ms));
        }
        let may_requeue = self.held_until.is_none_or(|until| monotonic >= until);
        if may_requeue {
            self.held_until = None;
        }
        Look {
            stepped_ms,
            may_requeue,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use warden_store::ManualClock;

    const LEASE: Duration = Duration::from_secs(30);
    const HOUR_MS: i64 = 3_600_000;

    fn look(gate: &mut RequeueGate, clock: &ManualClock, expect: (Option<i64>, bool)) {
        let Look {
            stepped_ms,
            may_requeue,
        } = gate.look(clock);
        assert_eq!((stepped_ms, may_requeue), expect, "{gate:?}");
    }

    #[test]
    fn a_step_forward_holds_requeueing_for_one_lease() {
        let clock = ManualClock::new(1_796_131_143_000);
        let mut gate = RequeueGate::new(LEASE);
        look(&mut gate, &clock, (None, true));
        clock.advance(Duration::from_secs(15));
        look(&mut gate, &clock, (None, true));
        // Two hours forward while 15 s pass.
        clock.advance(Duration::from_secs(15));
        clock.step(2 * HOUR_MS);
        look(&mut gate, &clock, (Some(2 * HOUR_MS), false));
        // Held for a lease from the look that saw the step, whatever the wall clock says.
        clock.advance(Duration::from_secs(15));
        look(&mut gate, &clock, (None, false));
        clock.advance(Duration::from_secs(14));
        look(&mut gate, &clock, (None, false));
        clock.advance(Duration::from_secs(1));
        look(&mut gate, &clock, (None, true));
        clock.advance(Duration::from_secs(15));
        look(&mut gate, &clock, (None, true));
    }

    #[test]
    fn a_step_back_or_drift_holds_nothing() {
        let clock = ManualClock::new(1_796_131_143_000);
        let mut gate = RequeueGate::new(LEASE);
        look(&mut gate, &clock, (None, true));
        clock.advance(Duration::from_secs(15));
        clock.step(-2 * HOUR_MS);
        look(&mut gate, &clock, (Some(-2 * HOUR_MS), true));
        // Drift within the tolerance is no step, in either direction.
        clock.advance(Duration::from_secs(15));
        clock.step(STEP_TOLERANCE_MS);
        look(&mut gate, &clock, (None, true));
        clock.advance(Duration::from_secs(15));
        clock.step(-STEP_TOLERANCE_MS);
        look(&mut gate, &clock, (None, true));
    }

    #[test]
    fn another_step_while_held_holds_a_lease_from_that_one() {
        let clock = ManualClock::new(1_796_131_143_000);
        let mut gate = RequeueGate::new(LEASE);
        look(&mut gate, &clock, (None, true));
        clock.step(HOUR_MS);
        look(&mut gate, &clock, (Some(HOUR_MS), false));
        clock.advance(Duration::from_secs(20));
        clock.step(HOUR_MS);
        look(&mut gate, &clock, (Some(HOUR_MS), false));
        clock.advance(Duration::from_secs(29));
        look(&mut gate, &clock, (None, false));
        clock.advance(Duration::from_secs(1));
        look(&mut gate, &clock, (None, true));
    }
}
