//! What every broker's topology (the queues, streams or topics a workload needs) offers the
//! tools: a plan of changes people can read, and applying it, refused whole while the plan
//! holds a change that cannot be made in place.

use crate::error::{Error, ErrorKind, Result};
use async_trait::async_trait;
use std::fmt;

/// One difference between a broker and the topology wanted.
pub trait TopologyChange: fmt::Display + Send + Sync {
    /// A change the tool refuses to make: something would have to be recreated (and its
    /// messages moved) first. `apply` changes nothing while the plan holds one.
    fn is_conflict(&self) -> bool {
        false
    }

    /// Whether applying it changes the broker (a difference only reported, such as a topic
    /// with fewer partitions left as it is, does not).
    fn is_made(&self) -> bool {
        true
    }
}

/// A broker's topology for a workload.
#[async_trait]
pub trait BrokerTopology: Send + Sync {
    /// One change.
    type Change: TopologyChange;

    /// What [`apply`](Self::apply) would change, changing nothing.
    async fn plan(&self) -> Result<Vec<Self::Change>>;

    /// Make the changes (none when the plan holds a conflict); returns the plan it carried out.
    async fn apply(&self) -> Result<Vec<Self::Change>>;
}

/// Implement [`BrokerTopology`] for `$topology`, whose own `plan` and `apply` return
/// `Result<Vec<$change>>`.
#[macro_export]
macro_rules! broker_topology {
    ($topology:ty, $change:ty) => {
        #[$crate::async_trait]
        impl $crate::BrokerTopology for $topology {
            type Change = $change;

            async fn plan(&self) -> $crate::Result<Vec<$change>> {
                <$topology>::plan(self).await
            }

            async fn apply(&self) -> $crate::Result<Vec<$change>> {
                <$topology>::apply(self).await
            }
        }
    };
}

/// An error naming every conflict of `plan` on `broker`, or `Ok` when there is none.
pub fn refuse_conflicts<C: TopologyChange>(broker: &str, plan: &[C]) -> Result<()> {
    let conflicts: Vec<String> = plan
        .iter()
        .filter(|c| c.is_conflict())
        .map(ToString::to_string)
        .collect();
    if conflicts.is_empty() {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Config,
        format!(
            "the {broker} topology has conflicts, nothing changed: {}",
            conflicts.join("; ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct C(&'static str, bool);

    impl fmt::Display for C {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl TopologyChange for C {
        fn is_conflict(&self) -> bool {
            self.1
        }
    }

    #[test]
    fn a_plan_with_conflicts_is_refused_naming_each() {
        assert!(refuse_conflicts("test", &[C("create a", false)]).is_ok());
        let e = refuse_conflicts(
            "test",
            &[C("create a", false), C("b differs", true), C("c too", true)],
        )
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config);
        assert_eq!(
            e.message(),
            "the test topology has conflicts, nothing changed: b differs; c too"
        );
    }
}
