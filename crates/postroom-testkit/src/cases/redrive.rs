//! Redrive: selection by criterion, dry run, bounded rate with progress, an audit of the
//! ids sent, and a run that resumes after an interruption.

use super::*;
use crate::effect::Fault;
use postroom_core::{MessageId, ParkedStatus};

/// An operator selects by criterion, previews, and redrives at a bounded rate; the ids are
/// recorded and each is applied once; unselected messages stay parked.
pub async fn redrive_by_criterion_at_rate(b: &Arc<Backend>) {
    let (c, topic, h, run) = consume(b, "redrive", Fault::Permanent).await;
    let selected: Vec<Envelope> = (0..3).map(|i| order(&format!("rd{i}"), 1)).collect();
    let other = Envelope::builder("order.created", "other-producer")
        .aggregate("order", "keep", 1)
        .build();
    for e in &selected {
        b.produce(e, &topic).await.unwrap();
    }
    b.produce(&other, &topic).await.unwrap();
    park_then_heal(b, &c, &h, 4).await;
    let redriver = postroom_core::Redriver::new(b.parking(), b.publisher());
    let ids: Vec<MessageId> = selected.iter().map(|e| e.id).collect();
    let filter = ParkingFilter {
        consumer: Some(c.clone()),
        ids: ids.clone(),
        ..ParkingFilter::default()
    };
    let preview = redriver.preview(&filter, 100).await.unwrap();
    assert_eq!(preview.len(), 3, "dry run shows the selection");
    assert_eq!(
        parked_of(b, &c)
            .await
            .iter()
            .filter(|p| p.status == ParkedStatus::Parked)
            .count(),
        4,
        "dry run changes nothing"
    );
    let run_rec = redriver.start(&filter, 100, "tester").await.unwrap();
    assert_eq!(run_rec.total, 3);
    let started = Instant::now();
    let mut seen = Vec::new();
    let done = redriver
        .execute(&run_rec.id, 4.0, |p| seen.push(p.done))
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(done.done, 3);
    assert_eq!(seen, vec![1, 2, 3], "progress after each message");
    assert!(
        took >= Duration::from_millis(490),
        "3 messages at 4/s take at least 0.5 s, took {took:?}"
    );
    until(
        Duration::from_secs(20),
        "every redriven message applied",
        || async { effects_of(b, &c, &selected).await == 3 },
    )
    .await;
    run.stop().await;
    for e in &selected {
        assert_eq!(effect_of(b, &c, e).await, 1);
        let calls = h.calls_for(e.id);
        assert_eq!(
            calls.last().unwrap().attempt,
            0,
            "a redrive gets a fresh budget"
        );
    }
    let parked = parked_of(b, &c).await;
    let still: Vec<_> = parked
        .iter()
        .filter(|p| p.status == ParkedStatus::Parked)
        .collect();
    assert_eq!(still.len(), 1);
    assert_eq!(still[0].message_id, other.id);
    assert!(
        parked
            .iter()
            .filter(|p| p.status == ParkedStatus::Redriven)
            .all(|p| ids.contains(&p.message_id) && p.redrive_count == 1)
    );
    let runs = b.parking().redrive_runs(10).await.unwrap();
    assert!(
        runs.iter()
            .any(|r| r.id == run_rec.id && r.done == 3 && r.operator == "tester")
    );
}

/// A redrive interrupted halfway continues with what is pending; nothing applies twice.
pub async fn redrive_resumes_after_interruption(b: &Arc<Backend>) {
    let (c, topic, h, run) = consume(b, "resume", Fault::Permanent).await;
    let envs: Vec<Envelope> = (0..4).map(|i| order(&format!("rs{i}"), 1)).collect();
    for e in &envs {
        b.produce(e, &topic).await.unwrap();
    }
    park_then_heal(b, &c, &h, 4).await;
    let filter = ParkingFilter {
        consumer: Some(c.clone()),
        ..ParkingFilter::default()
    };
    // The first pass is interrupted by a publish that fails on the third message (the broker
    // went away); the second pass resumes the recorded run.
    let publisher = Arc::new(CountingPublisher {
        inner: b.publisher(),
        fail_on: std::sync::atomic::AtomicUsize::new(3),
        sent: std::sync::Mutex::new(std::collections::HashMap::new()),
    });
    let redriver = postroom_core::Redriver::new(b.parking(), publisher.clone());
    let rec = redriver.start(&filter, 100, "tester").await.unwrap();
    let first = redriver.execute(&rec.id, 50.0, |_| {}).await;
    assert!(first.is_err(), "the first pass is interrupted");
    let partial = b
        .parking()
        .redrive_run(&rec.id)
        .await
        .unwrap()
        .unwrap()
        .done;
    assert_eq!(partial, 2, "two sent and recorded before the interruption");
    let done = redriver.execute(&rec.id, 50.0, |_| {}).await.unwrap();
    assert_eq!(done.done, 4);
    let sent = publisher.sent.lock().unwrap().clone();
    assert_eq!(sent.len(), 4, "every selected id sent");
    assert!(
        sent.values().all(|n| *n == 1),
        "a resumed run sends each id exactly once: {sent:?}"
    );
    until(Duration::from_secs(20), "every message applied", || async {
        effects_of(b, &c, &envs).await == 4
    })
    .await;
    run.stop().await;
    for e in &envs {
        assert_eq!(effect_of(b, &c, e).await, 1);
    }
}

/// Relay the outbox, wait until the `count` messages the failing handler `h` rejects are
/// parked for consumer `c`, then heal the handler so that redriven messages apply.
async fn park_then_heal(b: &Arc<Backend>, c: &str, h: &EffectHandler, count: usize) {
    relay_all(b, "r1").await;
    wait_parked(
        b,
        c,
        count,
        Duration::from_secs(20),
        "the failing messages parked",
    )
    .await;
    h.set_fault(Fault::None);
}

/// A publisher that counts what it sent per id and fails once, on the n-th publish.
struct CountingPublisher {
    inner: Arc<dyn postroom_core::Publisher>,
    fail_on: std::sync::atomic::AtomicUsize,
    sent: std::sync::Mutex<std::collections::HashMap<MessageId, u32>>,
}

#[async_trait::async_trait]
impl postroom_core::Publisher for CountingPublisher {
    async fn publish(&self, m: &postroom_core::OutgoingMessage) -> postroom_core::Result<()> {
        if self
            .fail_on
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst)
            == 1
        {
            return Err(postroom_core::Error::new(
                postroom_core::ErrorKind::Connection,
                "injected: the broker went away",
            ));
        }
        self.inner.publish(m).await?;
        *self.sent.lock().unwrap().entry(m.id).or_default() += 1;
        Ok(())
    }
}
