//! Per-key dispatch: deliveries that share a key run one at a time in arrival order, each key
//! on its own task; keys without work have no task and no entry.

use super::step::Step;
use crate::handler::Handler;
use crate::sync::lock_unpoisoned;
use crate::transport::Delivery;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// One pulled delivery and what it holds until it is settled.
pub(super) struct Job<D, H: ?Sized> {
    pub(super) delivery: D,
    /// The loop's hold on a pulled-but-unsettled delivery (bounds memory and shutdown).
    pub(super) slot: OwnedSemaphorePermit,
    /// Handling permits (the concurrency limit).
    pub(super) handling: Arc<Semaphore>,
    pub(super) step: Step<H>,
}

impl<D: Delivery, H: Handler + ?Sized> Job<D, H> {
    pub(super) async fn run(self) {
        let permit = self
            .handling
            .clone()
            .acquire_owned()
            .await
            .expect("semaphore is never closed");
        self.step.process(self.delivery).await;
        drop(permit);
        drop(self.slot);
    }
}

/// Jobs waiting behind the running one, per key.
type Waiting<D, H> = Arc<Mutex<HashMap<String, VecDeque<Job<D, H>>>>>;

/// Queues of deliveries waiting for their key.
pub(super) struct KeyedQueues<D, H: ?Sized> {
    waiting: Waiting<D, H>,
}

impl<D, H: ?Sized> Default for KeyedQueues<D, H> {
    fn default() -> Self {
        Self {
            waiting: Arc::new(Mutex::new(HashMap::new())),
        }
    }
}

impl<D: Delivery, H: Handler + ?Sized> KeyedQueues<D, H> {
    /// Run `job` after every earlier job of `key`.
    pub(super) fn dispatch(&self, key: String, job: Job<D, H>) {
        {
            let mut map = lock_unpoisoned(&self.waiting);
            if let Some(queue) = map.get_mut(&key) {
                queue.push_back(job);
                return;
            }
            map.insert(key.clone(), VecDeque::new());
        }
        let waiting = self.waiting.clone();
        tokio::spawn(async move {
            let mut job = job;
            loop {
                job.run().await;
                let mut map = lock_unpoisoned(&waiting);
                match map.get_mut(&key).and_then(VecDeque::pop_front) {
                    Some(next) => job = next,
                    None => {
                        map.remove(&key);
                        break;
                    }
                }
            }
        });
    }
}
