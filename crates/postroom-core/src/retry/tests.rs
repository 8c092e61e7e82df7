use super::*;
use proptest::prelude::*;

fn at(attempt: u32, class: ErrorClass, age_s: i64) -> (Attempt<'static>, DateTime<Utc>) {
    let now = Utc::now();
    (
        Attempt {
            attempt,
            occurred_at: Some(now - chrono::Duration::seconds(age_s)),
            now,
            class,
            code: "e",
            message: "boom",
        },
        now,
    )
}

#[test]
fn walks_the_default_ladder_then_parks() {
    let p = RetryPolicy::default();
    let delays: Vec<u64> = (0..3)
        .map(
            |n| match p.decide(&at(n, ErrorClass::Transient, 0).0, 0.0) {
                Disposition::Retry(r) => {
                    assert_eq!(r.attempt, n + 1);
                    r.delay.as_secs()
                }
                other => panic!("{other:?}"),
            },
        )
        .collect();
    assert_eq!(delays, vec![5, 30, 300]);
    assert!(matches!(
        p.decide(&at(3, ErrorClass::Transient, 0).0, 0.0),
        Disposition::Park(_)
    ));
}

#[test]
fn permanent_parks_at_once_and_unknown_is_bounded() {
    let p = RetryPolicy::default();
    assert!(matches!(
        p.decide(&at(0, ErrorClass::Permanent, 0).0, 0.5),
        Disposition::Park(_)
    ));
    assert!(matches!(
        p.decide(&at(1, ErrorClass::Unknown, 0).0, 0.5),
        Disposition::Retry(_)
    ));
    assert!(matches!(
        p.decide(&at(2, ErrorClass::Unknown, 0).0, 0.5),
        Disposition::Park(_)
    ));
}

#[test]
fn deadline_parks_before_scheduling_past_it() {
    let p = RetryPolicy {
        max_age: Some(Duration::from_secs(60)),
        ..RetryPolicy::default()
    };
    // 58 s old: the next retry (5 s) would land after the 60 s deadline.
    match p.decide(&at(0, ErrorClass::Transient, 58).0, 0.0) {
        Disposition::Park(r) => {
            assert!(r.error_message.contains("deadline"), "{}", r.error_message)
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        p.decide(&at(0, ErrorClass::Transient, 10).0, 0.0),
        Disposition::Retry(_)
    ));
}

#[test]
fn ladder_parses_and_prints() {
    let l: RetryLadder = "250ms,5s,5m,1h".parse().unwrap();
    assert_eq!(l.to_string(), "250ms,5s,5m,1h");
    assert!("".parse::<RetryLadder>().is_err());
    assert!("0s".parse::<RetryLadder>().is_err());
    assert!("5x".parse::<RetryLadder>().is_err());
}

proptest! {
    #[test]
    fn never_earlier_than_stage_and_jitter_bounded(
        attempt in 0u32..10, unit in 0.0f64..1.0, jitter in 0.0f64..1.0,
        stages in proptest::collection::vec(1u64..10_000, 1..6),
    ) {
        let ladder = RetryLadder::new(stages.iter().map(|ms| Duration::from_millis(*ms)).collect()).unwrap();
        let p = RetryPolicy { ladder: ladder.clone(), max_retries: 20, max_age: None, jitter, ..RetryPolicy::default() };
        match p.decide(&at(attempt, ErrorClass::Transient, 0).0, unit) {
            Disposition::Retry(r) => {
                prop_assert_eq!(r.attempt, attempt + 1);
                prop_assert_eq!(r.stage, (attempt as usize).min(ladder.len() - 1));
                prop_assert!(r.delay >= r.stage_delay);
                prop_assert!(r.delay <= r.stage_delay.mul_f64(1.0 + jitter) + Duration::from_nanos(1));
            }
            other => prop_assert!(false, "unexpected {:?}", other),
        }
    }

    #[test]
    fn attempts_never_exceed_budget(attempt in 0u32..50, max in 0u32..10, class_n in 0u8..3) {
        let class = [ErrorClass::Transient, ErrorClass::Permanent, ErrorClass::Unknown][class_n as usize];
        let p = RetryPolicy { max_retries: max, max_age: None, ..RetryPolicy::default() };
        if let Disposition::Retry(r) = p.decide(&at(attempt, class, 0).0, 0.3) {
            prop_assert!(class != ErrorClass::Permanent);
            prop_assert!(r.attempt <= max);
        }
    }

    #[test]
    fn never_schedules_past_deadline(age in 0i64..400, attempt in 0u32..3, unit in 0.0f64..1.0) {
        let p = RetryPolicy { max_age: Some(Duration::from_secs(360)), ..RetryPolicy::default() };
        let (a, now) = at(attempt, ErrorClass::Transient, age);
        if let Disposition::Retry(r) = p.decide(&a, unit) {
            let due = now + chrono::Duration::from_std(r.delay).unwrap();
            prop_assert!(due <= a.occurred_at.unwrap() + chrono::Duration::seconds(360));
        }
    }
}

/// Inputs at the edges of their types give a decision, never a panic or a wrapped number:
/// an `occurred_at` near the end of the calendar with a deadline, an attempt of `u32::MAX`.
#[test]
fn edge_inputs_decide_without_panicking() {
    let p = RetryPolicy::default().retries(u32::MAX);
    let now = Utc::now();
    let far = DateTime::<Utc>::MAX_UTC - chrono::Duration::seconds(1);
    let a = Attempt {
        attempt: 0,
        occurred_at: Some(far),
        now,
        class: ErrorClass::Transient,
        code: "e",
        message: "m",
    };
    assert!(matches!(p.decide(&a, 0.5), Disposition::Retry(_)));
    let a = Attempt {
        attempt: u32::MAX - 1,
        occurred_at: Some(now),
        now,
        class: ErrorClass::Transient,
        code: "e",
        message: "m",
    };
    match p.decide(&a, 0.5) {
        Disposition::Retry(r) => assert_eq!(r.attempt, u32::MAX),
        other => panic!("{other:?}"),
    }
    let a = Attempt {
        attempt: u32::MAX,
        ..a
    };
    assert!(matches!(p.decide(&a, 0.5), Disposition::Park(_)));
}

#[test]
fn retries_and_ladder_are_stated_separately() {
    let p = RetryPolicy::default()
        .ladder("1s".parse().unwrap())
        .retries(3);
    assert_eq!(p.max_retries, 3);
    assert_eq!(p.ladder.len(), 1);
    for n in 0..3 {
        assert!(matches!(
            p.decide(&at(n, ErrorClass::Transient, 0).0, 0.0),
            Disposition::Retry(ref r) if r.stage_delay == Duration::from_secs(1)
        ));
    }
}
