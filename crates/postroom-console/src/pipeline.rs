//! The pipeline over the last hour, kept by the console itself: a sampler reads every
//! consumer's figures, the relay's lag and the watched inbox feeds' figures at a fixed
//! interval into a ring buffer (no Prometheus needed to draw the charts), and sets the same
//! figures as gauges for `/metrics`.

use crate::backend::{ConsumerFigures, ParkingConsole, PipelineProbe, ScheduledFigures};
use crate::feeds::{FeedSample, FeedScraper};
use crate::metrics as cm;
use chrono::{DateTime, Utc};
use metrics_exporter_prometheus::PrometheusHandle;
use postroom_core::metrics as m;
use postroom_core::{ParkingFilter, ParkingQuery};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// One consumer in one sample.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConsumerSample {
    /// Figures read from the store and transport.
    pub figures: ConsumerFigures,
    /// Parked copies waiting for an operator.
    pub parked_waiting: u64,
    /// Retries scheduled by consumers in this process so far (from the metrics recorder),
    /// when a recorder is installed.
    pub retried_total: Option<f64>,
}

/// Everything read at one instant.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// When.
    pub at: DateTime<Utc>,
    /// Age of the oldest unpublished outbox row.
    pub relay_lag: Option<Duration>,
    /// Unpublished outbox rows.
    pub outbox_pending: u64,
    /// Scheduled outbox rows not yet due (among the unpublished ones).
    pub scheduled: ScheduledFigures,
    /// By consumer.
    pub consumers: BTreeMap<String, ConsumerSample>,
    /// The watched inbox feeds, in the order given (read by the sampler; empty in a sample
    /// read for a page).
    pub feeds: Vec<FeedSample>,
}

/// The last hour of samples.
#[derive(Debug)]
pub struct History {
    samples: Mutex<VecDeque<Sample>>,
    capacity: usize,
    every: Duration,
}

impl History {
    /// Room for one hour of samples taken every `every`.
    #[must_use]
    pub fn for_hour(every: Duration) -> Self {
        let capacity = (3600.0 / every.as_secs_f64().max(0.001)).ceil() as usize;
        Self {
            samples: Mutex::new(VecDeque::with_capacity(capacity.min(100_000))),
            capacity: capacity.clamp(2, 100_000),
            every,
        }
    }

    /// Add a sample, dropping the oldest beyond the capacity.
    pub fn push(&self, s: Sample) {
        let mut q = self.samples.lock().expect("history lock");
        while q.len() >= self.capacity {
            q.pop_front();
        }
        q.push_back(s);
    }

    /// The samples, oldest first.
    #[must_use]
    pub fn samples(&self) -> Vec<Sample> {
        self.samples
            .lock()
            .expect("history lock")
            .iter()
            .cloned()
            .collect()
    }

    /// The newest sample.
    #[must_use]
    pub fn latest(&self) -> Option<Sample> {
        self.samples.lock().expect("history lock").back().cloned()
    }

    /// The interval between samples.
    #[must_use]
    pub fn every(&self) -> Duration {
        self.every
    }

    /// How many samples it keeps at most.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// Retries per consumer counted by this process's recorder (`postroom_retries_total`).
fn retries_by_consumer(handle: &PrometheusHandle) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in handle.render().lines() {
        let Some(rest) = line.strip_prefix(m::RETRIED) else {
            continue;
        };
        let Some((labels, value)) = rest.strip_prefix('{').and_then(|r| r.split_once("} ")) else {
            continue;
        };
        let consumer = labels.split(',').find_map(|kv| {
            kv.strip_prefix("consumer=\"")
                .and_then(|v| v.strip_suffix('"'))
        });
        if let (Some(c), Ok(v)) = (consumer, value.trim().parse::<f64>()) {
            *out.entry(c.to_string()).or_default() += v;
        }
    }
    out
}

/// Read one sample and set the gauges.
pub async fn sample(
    probe: &dyn PipelineProbe,
    parking: &dyn ParkingConsole,
    prometheus: Option<&PrometheusHandle>,
) -> postroom_core::Result<Sample> {
    let (relay_lag, outbox_pending) = probe.relay().await?;
    let scheduled = probe.scheduled().await?;
    let retries = prometheus.map(retries_by_consumer);
    let mut consumers = BTreeMap::new();
    for name in probe.consumers().await? {
        let figures = probe.consumer(&name).await?;
        let waiting = parking
            .lot()
            .count_parked(&ParkingQuery {
                filter: ParkingFilter {
                    consumer: Some(name.clone()),
                    ..ParkingFilter::default()
                },
                ..ParkingQuery::default()
            })
            .await?;
        let b = &figures.backlog;
        let label = name.clone();
        metrics::gauge!(m::READY, "consumer" => label.clone()).set(b.ready as f64);
        metrics::gauge!(m::UNACKED, "consumer" => label.clone()).set(b.unacked as f64);
        metrics::gauge!(m::DELAYED, "consumer" => label.clone()).set(b.delayed as f64);
        metrics::gauge!(m::OLDEST_READY_AGE, "consumer" => label.clone())
            .set(b.oldest_ready_age.map_or(0.0, |d| d.as_secs_f64()));
        metrics::gauge!(cm::PARKED_WAITING, "consumer" => label.clone()).set(waiting as f64);
        metrics::gauge!(cm::PARKING_INFLOW, "consumer" => label.clone())
            .set(figures.parked_last_minute as f64);
        metrics::gauge!(cm::HANDLED_PER_MINUTE, "consumer" => label)
            .set(figures.handled_last_minute as f64);
        let retried_total = retries
            .as_ref()
            .map(|r| r.get(&name).copied().unwrap_or(0.0));
        consumers.insert(
            name,
            ConsumerSample {
                figures,
                parked_waiting: waiting,
                retried_total,
            },
        );
    }
    metrics::gauge!(m::OUTBOX_PENDING).set(outbox_pending as f64);
    metrics::gauge!(cm::RELAY_LAG).set(relay_lag.map_or(0.0, |d| d.as_secs_f64()));
    Ok(Sample {
        at: Utc::now(),
        relay_lag,
        outbox_pending,
        scheduled,
        consumers,
        feeds: Vec::new(),
    })
}

/// Set the feed gauges from one reading of the feeds.
pub fn set_feed_gauges(feeds: &[FeedSample]) {
    for f in feeds {
        metrics::gauge!(cm::FEED_UP, "feed" => f.name.clone()).set(if f.up() { 1.0 } else { 0.0 });
        for (consumer, c) in &f.consumers {
            let labels = [("feed", f.name.clone()), ("consumer", consumer.clone())];
            metrics::gauge!(cm::FEED_STORED, &labels).set(c.stored as f64);
            metrics::gauge!(cm::FEED_DUPLICATES, &labels).set(c.duplicates as f64);
            if let Some(lag) = c.lag {
                metrics::gauge!(cm::FEED_LAG, &labels).set(lag as f64);
            }
        }
    }
}

/// Sample every `every` into `history` until `shutdown` turns true.
pub async fn run_sampler(
    history: Arc<History>,
    probe: Arc<dyn PipelineProbe>,
    parking: Arc<dyn ParkingConsole>,
    prometheus: Option<PrometheusHandle>,
    feeds: Arc<FeedScraper>,
    every: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => {}
        }
        if *shutdown.borrow() {
            break;
        }
        // The feeds are read while the store is: a slow feed costs at most its timeout.
        let (read, fed) = tokio::join!(
            sample(&*probe, &*parking, prometheus.as_ref()),
            feeds.scrape()
        );
        set_feed_gauges(&fed);
        match read {
            Ok(mut s) => {
                s.feeds = fed;
                history.push(s);
            }
            Err(e) => tracing::warn!(error = %e, "pipeline sample failed"),
        }
    }
}

/// Retries per minute of `consumer` between the last two samples that counted them.
#[must_use]
pub fn retried_per_minute(samples: &[Sample], consumer: &str) -> Option<f64> {
    let mut counted = samples.iter().rev().filter_map(|s| {
        s.consumers
            .get(consumer)
            .and_then(|c| c.retried_total)
            .map(|v| (s.at, v))
    });
    let (t1, v1) = counted.next()?;
    let (t0, v0) = counted.next()?;
    let secs = (t1 - t0).num_milliseconds() as f64 / 1000.0;
    (secs > 0.0).then(|| ((v1 - v0).max(0.0)) * 60.0 / secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64, retried: Option<f64>) -> Sample {
        let mut consumers = BTreeMap::new();
        consumers.insert(
            "c".to_string(),
            ConsumerSample {
                retried_total: retried,
                ..ConsumerSample::default()
            },
        );
        Sample {
            at: DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap(),
            relay_lag: None,
            outbox_pending: 0,
            scheduled: ScheduledFigures::default(),
            consumers,
            feeds: Vec::new(),
        }
    }

    #[test]
    fn ring_keeps_the_last_hour() {
        let h = History::for_hour(Duration::from_secs(600));
        assert_eq!(h.capacity(), 6);
        for i in 0..10 {
            h.push(at(i, None));
        }
        let s = h.samples();
        assert_eq!(s.len(), 6);
        assert_eq!(s[0].at, at(4, None).at);
        assert_eq!(h.latest().unwrap().at, at(9, None).at);
    }

    #[test]
    fn retry_rate_from_two_samples() {
        let s = vec![at(0, Some(10.0)), at(30, Some(25.0))];
        assert_eq!(retried_per_minute(&s, "c"), Some(30.0));
        assert_eq!(retried_per_minute(&s[..1], "c"), None);
        assert_eq!(retried_per_minute(&s, "other"), None);
    }
}
