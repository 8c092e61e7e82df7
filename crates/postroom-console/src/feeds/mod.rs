//! The inbox feeds the console watches: each `postroom feed` process serves its figures on
//! its own `/metrics`; the console reads them there at its sampling interval (as an
//! operator console reads what the endpoints report) and keeps per feed whether it
//! answered, and per consumer what it stored, the duplicates it absorbed and its lag.
//!
//! A feed is named by the operator (`nats=127.0.0.1:9466`). Each is read with a short
//! timeout, all at once: a feed that does not answer is shown down with the reason and
//! delays nobody.

pub mod exposition;

use chrono::{DateTime, Utc};
use postroom_core::metrics as m;
use postroom_core::{Error, ErrorKind, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

/// Largest `/metrics` body read from a feed.
const MAX_BODY: usize = 4 * 1024 * 1024;

/// One feed to watch: a name the operator chose and the address of its status server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedTarget {
    /// How the console shows it (letters, digits, `_`, `-`, `.`).
    pub name: String,
    /// `HOST:PORT` of its `/metrics`.
    pub addr: String,
}

impl FeedTarget {
    /// Read `NAME=HOST:PORT`.
    pub fn parse(s: &str) -> Result<Self> {
        // A value with '@' may hold a user and password (typed as in a broker URL): it is
        // refused without being shown.
        let shown = if s.contains('@') {
            "(not shown: it holds '@')".to_string()
        } else {
            format!("{s:?}")
        };
        let bad = |why: &str| {
            Error::new(
                ErrorKind::Config,
                format!(
                    "bad feed {shown}: {why} (expected NAME=HOST:PORT, e.g. nats=127.0.0.1:9466)"
                ),
            )
        };
        let (name, addr) = s.trim().split_once('=').ok_or_else(|| bad("no '='"))?;
        let (name, addr) = (name.trim(), addr.trim());
        if addr.contains('@') {
            return Err(bad("a feed's address takes no user or password"));
        }
        if name.is_empty() {
            return Err(bad("no name before '='"));
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            return Err(bad("a name takes letters, digits, '_', '-' and '.' only"));
        }
        let (host, port) = addr
            .rsplit_once(':')
            .ok_or_else(|| bad("the address has no port"))?;
        let host_ok = if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            v6.parse::<std::net::Ipv6Addr>().is_ok()
        } else {
            !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.'))
        };
        if !host_ok {
            return Err(bad("the address needs a host name or IP before its port"));
        }
        match port.parse::<u16>() {
            Ok(p) if p > 0 => {}
            _ => return Err(bad("the port is not a number from 1 to 65535")),
        }
        Ok(Self {
            name: name.to_string(),
            addr: addr.to_string(),
        })
    }

    /// The URL of its metrics.
    #[must_use]
    pub fn metrics_url(&self) -> String {
        format!("http://{}/metrics", self.addr)
    }
}

impl fmt::Display for FeedTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.name, self.addr)
    }
}

/// Refuse two feeds of one name.
pub fn check_unique(feeds: &[FeedTarget]) -> Result<()> {
    let mut seen = BTreeSet::new();
    for f in feeds {
        if !seen.insert(f.name.as_str()) {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "two feeds are named {:?}: give each feed its own name",
                    f.name
                ),
            ));
        }
    }
    Ok(())
}

/// What one feed reported for one consumer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FeedConsumer {
    /// Messages it stored into the inbox queue since it started.
    pub stored: u64,
    /// Copies it found already there (absorbed) since it started.
    pub duplicates: u64,
    /// Messages on its broker not yet stored, when it has read its backlog.
    pub lag: Option<u64>,
}

/// One feed at one instant.
#[derive(Clone, Debug, PartialEq)]
pub struct FeedSample {
    /// Its name.
    pub name: String,
    /// Its address.
    pub addr: String,
    /// When it was read.
    pub at: DateTime<Utc>,
    /// Why it could not be read (`None`: it answered with its figures).
    pub error: Option<String>,
    /// By consumer (empty when it is down, or has no figures yet).
    pub consumers: BTreeMap<String, FeedConsumer>,
}

impl FeedSample {
    /// Whether it answered with its figures.
    #[must_use]
    pub fn up(&self) -> bool {
        self.error.is_none()
    }
}

/// The feed figures of a `/metrics` text, by consumer (summed over the `feed` label).
pub fn figures(text: &str) -> Result<BTreeMap<String, FeedConsumer>> {
    let series = exposition::parse(text)
        .map_err(|e| Error::new(ErrorKind::InvalidData, format!("not Prometheus text: {e}")))?;
    let mut out: BTreeMap<String, FeedConsumer> = BTreeMap::new();
    for s in series {
        if ![
            m::INBOX_FEED_STORED,
            m::INBOX_FEED_DUPLICATES,
            m::INBOX_FEED_LAG,
        ]
        .contains(&s.name.as_str())
        {
            continue;
        }
        let consumer = s.label("consumer").ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidData,
                format!("{} without a consumer label", s.name),
            )
        })?;
        if !(s.value.is_finite() && s.value >= 0.0) {
            return Err(Error::new(
                ErrorKind::InvalidData,
                format!("{} of {consumer}: {} is not a count", s.name, s.value),
            ));
        }
        let n = s.value.round() as u64;
        let c = out.entry(consumer.to_string()).or_default();
        match s.name.as_str() {
            // A feed's counts are summed over its series; absurd ones stop at the maximum.
            m::INBOX_FEED_STORED => c.stored = c.stored.saturating_add(n),
            m::INBOX_FEED_DUPLICATES => c.duplicates = c.duplicates.saturating_add(n),
            _ => c.lag = Some(c.lag.unwrap_or(0).saturating_add(n)),
        }
    }
    Ok(out)
}

/// Reads the feeds' `/metrics`.
#[derive(Clone, Debug)]
pub struct FeedScraper {
    targets: Vec<FeedTarget>,
    client: reqwest::Client,
    timeout: Duration,
}

impl FeedScraper {
    /// A scraper of `targets`, each read within `timeout`.
    pub fn new(targets: Vec<FeedTarget>, timeout: Duration) -> Result<Self> {
        check_unique(&targets)?;
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .no_proxy()
            .build()
            .map_err(|e| Error::new(ErrorKind::Config, format!("feed scraper: {e}")))?;
        Ok(Self {
            targets,
            client,
            timeout,
        })
    }

    /// The feeds it reads.
    #[must_use]
    pub fn targets(&self) -> &[FeedTarget] {
        &self.targets
    }

    /// Read every feed at once; one sample per feed, in the order given.
    pub async fn scrape(&self) -> Vec<FeedSample> {
        let reads = self.targets.iter().map(|t| self.scrape_one(t));
        futures::future::join_all(reads).await
    }

    async fn scrape_one(&self, t: &FeedTarget) -> FeedSample {
        let read = self.read(t).await;
        let (error, consumers) = match read.and_then(|text| figures(&text)) {
            Ok(c) => (None, c),
            Err(e) => (Some(e.message().to_string()), BTreeMap::new()),
        };
        FeedSample {
            name: t.name.clone(),
            addr: t.addr.clone(),
            at: Utc::now(),
            error,
            consumers,
        }
    }

    async fn read(&self, t: &FeedTarget) -> Result<String> {
        let url = t.metrics_url();
        let unreachable = |e: reqwest::Error| {
            let why = if e.is_timeout() {
                format!("no answer within {:?}", self.timeout)
            } else {
                // The innermost cause says it best ("Connection refused (os error 111)").
                let mut cause: &dyn std::error::Error = &e;
                while let Some(inner) = cause.source() {
                    cause = inner;
                }
                cause.to_string()
            };
            Error::new(ErrorKind::Connection, format!("cannot read {url}: {why}"))
        };
        let mut resp = self.client.get(&url).send().await.map_err(unreachable)?;
        if !resp.status().is_success() {
            return Err(Error::new(
                ErrorKind::Connection,
                format!("{url} answered {}", resp.status()),
            ));
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(unreachable)? {
            if body.len() + chunk.len() > MAX_BODY {
                return Err(Error::new(
                    ErrorKind::InvalidData,
                    format!("{url} is larger than {MAX_BODY} bytes"),
                ));
            }
            body.extend_from_slice(&chunk);
        }
        String::from_utf8(body)
            .map_err(|_| Error::new(ErrorKind::InvalidData, "the metrics are not UTF-8 text"))
    }
}

/// Per minute, between the last two samples in which `feed` answered with figures of
/// `consumer`, of the count `pick` reads (a feed restarted in between counts from zero).
#[must_use]
pub fn per_minute<'a>(
    feeds: impl DoubleEndedIterator<Item = &'a FeedSample>,
    consumer: &str,
    pick: fn(&FeedConsumer) -> u64,
) -> Option<f64> {
    let mut counted = feeds
        .rev()
        .filter_map(|f| f.consumers.get(consumer).map(|c| (f.at, pick(c))));
    let (t1, v1) = counted.next()?;
    let (t0, v0) = counted.next()?;
    let secs = (t1 - t0).num_milliseconds() as f64 / 1000.0;
    (secs > 0.0).then(|| v1.saturating_sub(v0) as f64 * 60.0 / secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_counts_summed_over_series_stop_at_the_maximum() {
        let text = format!(
            "{s}{{consumer=\"c\",feed=\"a\"}} 1e19\n{s}{{consumer=\"c\",feed=\"b\"}} 1e19\n",
            s = m::INBOX_FEED_STORED
        );
        let f = figures(&text).unwrap();
        assert_eq!(f["c"].stored, u64::MAX);
    }

    #[test]
    fn targets_are_read_strictly() {
        let t = FeedTarget::parse("nats=127.0.0.1:9466").unwrap();
        assert_eq!(
            (t.name.as_str(), t.addr.as_str()),
            ("nats", "127.0.0.1:9466")
        );
        assert_eq!(t.metrics_url(), "http://127.0.0.1:9466/metrics");
        assert_eq!(t.to_string(), "nats=127.0.0.1:9466");
        assert!(FeedTarget::parse(" kafka-2 = feed.internal:80 ").is_ok());
        assert!(FeedTarget::parse("v6=[::1]:9466").is_ok());
        for (bad, why) in [
            ("127.0.0.1:9466", "no '='"),
            ("=127.0.0.1:9466", "no name"),
            ("na ts=127.0.0.1:9466", "letters, digits"),
            ("nats=127.0.0.1", "no port"),
            ("nats=:9466", "host"),
            ("nats=http://x:9466", "host"),
            ("nats=[zz]:9466", "host"),
            ("nats=127.0.0.1:0", "port"),
            ("nats=127.0.0.1:70000", "port"),
            ("nats=127.0.0.1:x", "port"),
            ("nats=user:pw@127.0.0.1:9466", "no user or password"),
        ] {
            let e = FeedTarget::parse(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Config);
            assert!(e.message().contains(why), "{bad:?}: {e}");
            assert!(e.message().contains("NAME=HOST:PORT"), "{bad:?}: {e}");
            assert!(!e.message().contains("pw@"), "{bad:?}: {e}");
        }
        let two = [
            FeedTarget::parse("a=h:1").unwrap(),
            FeedTarget::parse("a=h:2").unwrap(),
        ];
        assert!(check_unique(&two[..1]).is_ok());
        let e = check_unique(&two).unwrap_err();
        assert!(e.message().contains("two feeds are named \"a\""), "{e}");
    }

    #[test]
    fn figures_of_a_feed_by_consumer() {
        let text = "# HELP x\n\
            postroom_inbox_feed_stored_total{consumer=\"inventory\",feed=\"nats\"} 40\n\
            postroom_inbox_feed_duplicates_total{consumer=\"inventory\",feed=\"nats\"} 3\n\
            postroom_inbox_feed_lag_messages{consumer=\"inventory\",feed=\"nats\"} 7\n\
            postroom_inbox_feed_stored_total{consumer=\"billing\",feed=\"nats\"} 1\n\
            postroom_relay_target{target=\"nats\"} 1\n";
        let f = figures(text).unwrap();
        assert_eq!(
            f["inventory"],
            FeedConsumer {
                stored: 40,
                duplicates: 3,
                lag: Some(7)
            }
        );
        assert_eq!(
            f["billing"],
            FeedConsumer {
                stored: 1,
                duplicates: 0,
                lag: None
            }
        );
        assert!(figures("postroom_relay_target 1\n").unwrap().is_empty());
        for (bad, why) in [
            (
                "<html><body>502</body></html>",
                "not Prometheus text: line 1",
            ),
            (
                "postroom_inbox_feed_stored_total 4",
                "without a consumer label",
            ),
            (
                "postroom_inbox_feed_lag_messages{consumer=\"c\"} -1",
                "is not a count",
            ),
            (
                "postroom_inbox_feed_stored_total{consumer=\"c\"} NaN",
                "is not a count",
            ),
        ] {
            let e = figures(bad).unwrap_err();
            assert!(e.message().contains(why), "{bad:?}: {e}");
        }
    }

    #[test]
    fn rates_between_the_last_two_readings() {
        let at = |secs: i64, stored: Option<u64>| FeedSample {
            name: "f".into(),
            addr: "h:1".into(),
            at: DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap(),
            error: stored.is_none().then(|| "down".to_string()),
            consumers: stored
                .map(|s| {
                    BTreeMap::from([(
                        "c".to_string(),
                        FeedConsumer {
                            stored: s,
                            ..FeedConsumer::default()
                        },
                    )])
                })
                .unwrap_or_default(),
        };
        let s = [at(0, Some(10)), at(30, Some(40)), at(40, None)];
        assert_eq!(per_minute(s.iter(), "c", |c| c.stored), Some(60.0));
        assert_eq!(per_minute(s[..1].iter(), "c", |c| c.stored), None);
        assert_eq!(per_minute(s.iter(), "x", |c| c.stored), None);
        // Restarted: counts from zero again, never a negative rate.
        let r = [at(0, Some(10)), at(30, Some(2))];
        assert_eq!(per_minute(r.iter(), "c", |c| c.stored), Some(0.0));
    }
}
