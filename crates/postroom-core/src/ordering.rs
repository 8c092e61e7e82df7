//! The aggregate version guard as a pure decision.
//!
//! A consumer that keeps, per aggregate, the last version it applied asks the guard what to do
//! with an incoming version:
//! equal to the expected one: apply; already applied: ack as a duplicate; ahead: defer until
//! the gap fills (a transient error, so it walks the bounded retry ladder and parks if the gap
//! never fills); state is never rolled back.

use crate::outcome::HandlerError;

/// What to do with an incoming aggregate version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VersionDecision {
    /// `incoming == last + 1` (or the first version of a new aggregate): apply it.
    Apply,
    /// `incoming <= last`: already applied; acknowledge, change nothing.
    AlreadyApplied,
    /// `incoming > last + 1`: versions are missing; wait for them.
    Gap {
        /// First missing version.
        missing_from: u64,
        /// Last missing version.
        missing_to: u64,
    },
}

/// Decide for `incoming` given the last applied version (`None`: nothing applied yet, so the
/// expected version is `first`, normally 1).
#[must_use]
pub fn check_version(last_applied: Option<u64>, incoming: u64, first: u64) -> VersionDecision {
    let expected = last_applied.map_or(first, |v| v + 1);
    if incoming == expected {
        VersionDecision::Apply
    } else if incoming < expected {
        VersionDecision::AlreadyApplied
    } else {
        VersionDecision::Gap {
            missing_from: expected,
            missing_to: incoming - 1,
        }
    }
}

impl VersionDecision {
    /// The handler error for a gap: transient, so the message is retried on the ladder and
    /// parked if the gap never fills.
    #[must_use]
    pub fn gap_error(&self, aggregate_key: &str) -> Option<HandlerError> {
        match *self {
            VersionDecision::Gap {
                missing_from,
                missing_to,
            } => Some(gap_error(aggregate_key, missing_from, missing_to)),
            VersionDecision::Apply | VersionDecision::AlreadyApplied => None,
        }
    }
}

/// The handler error for versions `missing_from..=missing_to` of `aggregate_key` not
/// applied yet: transient, with the code [`Code::VersionGap`](crate::outcome::codes::Code),
/// which the circuit breaker does not count as a dependency failure.
#[must_use]
pub fn gap_error(aggregate_key: &str, missing_from: u64, missing_to: u64) -> HandlerError {
    HandlerError::transient(
        crate::outcome::codes::Code::VersionGap.as_str(),
        format!("{aggregate_key}: versions {missing_from}..={missing_to} not applied yet"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_four_cases() {
        assert_eq!(check_version(None, 1, 1), VersionDecision::Apply);
        assert_eq!(check_version(Some(3), 4, 1), VersionDecision::Apply);
        assert_eq!(
            check_version(Some(3), 3, 1),
            VersionDecision::AlreadyApplied
        );
        assert_eq!(
            check_version(Some(3), 1, 1),
            VersionDecision::AlreadyApplied
        );
        assert_eq!(
            check_version(Some(3), 6, 1),
            VersionDecision::Gap {
                missing_from: 4,
                missing_to: 5
            }
        );
        assert!(check_version(Some(3), 6, 1).gap_error("order:1").is_some());
    }

    proptest! {
        /// Applying versions in any delivery order, with the guard, ends at the highest version
        /// having applied each exactly once and in order.
        #[test]
        fn any_order_applies_in_order(mut order in proptest::collection::vec(1u64..=8, 8..40)) {
            order.extend(1..=8);
            let mut last: Option<u64> = None;
            let mut applied = Vec::new();
            let mut pending: Vec<u64> = order;
            for _round in 0..100 {
                let mut deferred = Vec::new();
                for v in pending.drain(..) {
                    match check_version(last, v, 1) {
                        VersionDecision::Apply => { applied.push(v); last = Some(v); }
                        VersionDecision::AlreadyApplied => {}
                        VersionDecision::Gap { .. } => deferred.push(v),
                    }
                }
                pending = deferred;
                if pending.is_empty() { break; }
            }
            prop_assert_eq!(applied, (1..=8).collect::<Vec<_>>());
        }
    }
}
