//! Where a publish goes. SQS has no topics: a topic publish is sent to the work queue of
//! every consumer with a binding pattern that matches it (the reference matcher,
//! [`postroom_core::pattern::matches`]); a consumer route goes to that consumer's work queue
//! only. The table holds the topology's consumers and those bound at run time.

use crate::naming::QueueNames;
use postroom_core::pattern::matches;
use postroom_core::{Error, ErrorKind, Result, Route};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// One consumer's queues (names and URLs) and binding patterns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerQueues {
    /// Names.
    pub names: QueueNames,
    /// The work queue's URL.
    pub work_url: String,
    /// The DLQ's URL.
    pub dlq_url: String,
    /// Topic patterns.
    pub patterns: Vec<String>,
}

/// The routing table.
#[derive(Debug, Default)]
pub struct Routes {
    consumers: RwLock<BTreeMap<String, Arc<ConsumerQueues>>>,
}

impl Routes {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<ConsumerQueues>>> {
        self.consumers
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Add or replace a consumer's queues; patterns already bound are kept.
    pub fn insert(&self, mut queues: ConsumerQueues) {
        let mut all = self
            .consumers
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(old) = all.get(&queues.names.consumer) {
            for p in &old.patterns {
                if !queues.patterns.contains(p) {
                    queues.patterns.push(p.clone());
                }
            }
        }
        all.insert(queues.names.consumer.clone(), Arc::new(queues));
    }

    /// Add `patterns` to a known consumer; false when the consumer is unknown.
    pub fn bind(&self, consumer: &str, patterns: &[String]) -> bool {
        let Some(current) = self.get(consumer) else {
            return false;
        };
        let mut next = (*current).clone();
        for p in patterns {
            if !next.patterns.contains(p) {
                next.patterns.push(p.clone());
            }
        }
        if next != *current {
            self.insert(next);
        }
        true
    }

    /// A consumer's queues.
    #[must_use]
    pub fn get(&self, consumer: &str) -> Option<Arc<ConsumerQueues>> {
        self.read().get(consumer).cloned()
    }

    /// The queues a publish to `route` goes to; `Unroutable` when there is none.
    pub fn targets(&self, route: &Route) -> Result<Vec<Arc<ConsumerQueues>>> {
        let found: Vec<Arc<ConsumerQueues>> = match route {
            Route::Topic(topic) => self
                .read()
                .values()
                .filter(|c| c.patterns.iter().any(|p| matches(p, topic)))
                .cloned()
                .collect(),
            Route::Consumer(name) => self.get(name).into_iter().collect(),
        };
        if found.is_empty() {
            let what = match route {
                Route::Topic(t) => format!("no consumer's binding matches the topic {t:?}"),
                Route::Consumer(c) => format!("no queue is known for consumer {c:?}"),
            };
            return Err(Error::new(ErrorKind::Unroutable, what));
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consumer(name: &str, patterns: &[&str]) -> ConsumerQueues {
        ConsumerQueues {
            names: QueueNames::new("p", name, false).unwrap(),
            work_url: format!("http://q/{name}"),
            dlq_url: format!("http://q/{name}-dlq"),
            patterns: patterns.iter().map(|p| (*p).to_string()).collect(),
        }
    }

    #[test]
    fn topics_fan_out_to_matching_consumers_and_consumer_routes_to_one() {
        let r = Routes::default();
        r.insert(consumer("a", &["order.*"]));
        r.insert(consumer("b", &["order.created", "#.paid"]));
        let names = |route: Route| -> Vec<String> {
            r.targets(&route)
                .unwrap()
                .iter()
                .map(|c| c.names.consumer.clone())
                .collect()
        };
        assert_eq!(names(Route::Topic("order.created".into())), ["a", "b"]);
        assert_eq!(names(Route::Topic("x.paid".into())), ["b"]);
        assert_eq!(names(Route::Consumer("a".into())), ["a"]);
        let err = r.targets(&Route::Topic("nothing".into())).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unroutable);
        assert!(r.bind("a", &["x.#".to_string()]));
        assert_eq!(names(Route::Topic("x.y".into())), ["a"]);
        assert!(!r.bind("zzz", &[]));
        r.insert(consumer("a", &[]));
        assert_eq!(
            names(Route::Topic("x.y".into())),
            ["a"],
            "re-inserting keeps bindings"
        );
    }
}
