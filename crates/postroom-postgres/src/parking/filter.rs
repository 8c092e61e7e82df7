//! [`ParkingFilter`] as SQL with exactly the semantics of [`ParkingFilter::matches`].
//!
//! One static WHERE clause with nullable parameters `$1..$8`: an absent criterion is NULL
//! (or an empty id array) and matches everything.

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use postroom_core::ParkingFilter;
use sqlx::Postgres;
use sqlx::postgres::PgArguments;
use sqlx::query::Query;

/// The WHERE clause over `{prefix}parked` (no alias), using parameters `$1` to `$8`.
pub(crate) const WHERE: &str = "($1::boolean OR status = 'parked')
    AND ($2::text IS NULL OR message_type = $2)
    AND ($3::text IS NULL OR error_class = $3)
    AND ($4::text IS NULL OR error_code = $4)
    AND ($5::text IS NULL OR consumer = $5)
    AND ($6::timestamptz IS NULL OR parked_at >= $6)
    AND ($7::timestamptz IS NULL OR parked_at < $7)
    AND (cardinality($8::uuid[]) = 0 OR message_id = ANY($8))";

/// Stored times have microsecond precision; a bound with nanoseconds is rounded up to the
/// next microsecond so that `stored >= t` and `stored < t` give the same answer as in Rust
/// (for a whole-microsecond `stored`, `stored >= t ⇔ stored >= ceil(t)`, likewise `<`).
pub(crate) fn ceil_micros(t: DateTime<Utc>) -> DateTime<Utc> {
    let step = TimeDelta::microseconds(1);
    match t.duration_trunc(step) {
        Ok(down) if down == t => t,
        Ok(down) => down + step,
        Err(_) => t,
    }
}

/// Bind the filter's eight parameters onto `q`.
pub(crate) fn bind<'q>(
    q: Query<'q, Postgres, PgArguments>,
    f: &'q ParkingFilter,
) -> Query<'q, Postgres, PgArguments> {
    let ids: Vec<uuid::Uuid> = f.ids.iter().map(|i| i.as_uuid()).collect();
    q.bind(f.include_redriven)
        .bind(f.message_type.as_deref())
        .bind(f.error_class.map(|c| c.as_str()))
        .bind(f.error_code.as_deref())
        .bind(f.consumer.as_deref())
        .bind(f.since.map(ceil_micros))
        .bind(f.until.map(ceil_micros))
        .bind(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up_only_below_a_microsecond() {
        let t = DateTime::from_timestamp(1_700_000_000, 1_000).unwrap();
        assert_eq!(ceil_micros(t), t);
        let t2 = DateTime::from_timestamp(1_700_000_000, 1_001).unwrap();
        assert_eq!(
            ceil_micros(t2),
            DateTime::from_timestamp(1_700_000_000, 2_000).unwrap()
        );
    }
}
