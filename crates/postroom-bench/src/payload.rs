//! The messages every scenario sends: envelopes padded to the requested body size, spread
//! over 1,000 aggregates.

use postroom_core::{Envelope, OutgoingMessage};

/// Routing key of every bench message (bound with `bench.#`).
pub const ROUTING_KEY: &str = "bench.order.created";
/// Message type accepted by the bench consumers.
pub const MESSAGE_TYPE: &str = "order.created";
/// Aggregates the messages are spread over, unless a scenario says otherwise.
pub const AGGREGATES: usize = 1000;

/// Message `i` with a body of about `bytes` bytes (its aggregate key in its headers).
#[must_use]
pub fn message(i: usize, bytes: usize) -> OutgoingMessage {
    message_over(i, bytes, AGGREGATES)
}

/// Message `i`, spread round robin over `aggregates` aggregates (version `i / aggregates + 1`
/// of aggregate `i % aggregates`).
#[must_use]
pub fn message_over(i: usize, bytes: usize, aggregates: usize) -> OutgoingMessage {
    let aggregates = aggregates.max(1);
    let build = |pad: &str| {
        Envelope::builder(MESSAGE_TYPE, "bench")
            .aggregate(
                "order",
                format!("a{}", i % aggregates),
                (i / aggregates) as u64 + 1,
            )
            .data(serde_json::json!({"sku": "A-1", "qty": 1, "i": i, "pad": pad}))
            .build()
    };
    let bare = build("").to_bytes().len();
    let env = build(&"x".repeat(bytes.saturating_sub(bare)));
    OutgoingMessage::from_envelope(&env, ROUTING_KEY)
}

/// Message `i` like [`message`], built without an aggregate: each is its own key, unordered.
#[must_use]
pub fn unordered_message(i: usize, bytes: usize) -> OutgoingMessage {
    let build = |pad: &str| {
        Envelope::builder(MESSAGE_TYPE, "bench")
            .data(serde_json::json!({"sku": "A-1", "qty": 1, "i": i, "pad": pad}))
            .build()
    };
    let bare = build("").to_bytes().len();
    let env = build(&"x".repeat(bytes.saturating_sub(bare)));
    OutgoingMessage::from_envelope(&env, ROUTING_KEY)
}

/// Messages `from..from + n`.
#[must_use]
pub fn messages(from: usize, n: usize, bytes: usize) -> Vec<OutgoingMessage> {
    (from..from + n).map(|i| message(i, bytes)).collect()
}

/// Median of `values` (0 when empty).
#[must_use]
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The `p`-th percentile (0..=100) of `values`, nearest rank (0 when empty).
#[must_use]
pub fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * values.len() as f64).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_to_size() {
        let m = message(1234, 512);
        assert!((511..=513).contains(&m.body.len()), "{}", m.body.len());
        assert_eq!(m.aggregate_key(), "order:a234");
        assert_eq!(percentile(&mut [3.0, 1.0, 2.0, 4.0], 50.0), 2.0);
        assert_eq!(percentile(&mut [3.0, 1.0, 2.0, 4.0], 99.0), 4.0);
        assert_eq!(median(&[5.0, 1.0, 3.0]), 3.0);
    }
}
