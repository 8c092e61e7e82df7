//! Declaring the desired exchanges, queues and bindings over AMQP: what a reconnect does
//! (declarations are idempotent; policies stay on the broker).

use super::desired::DesiredTopology;
use crate::error::amqp;
use lapin::options::{
    ExchangeBindOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{Channel, ExchangeKind};
use postroom_core::Result;

fn kind(name: &str) -> ExchangeKind {
    match name {
        "topic" => ExchangeKind::Topic,
        "direct" => ExchangeKind::Direct,
        "fanout" => ExchangeKind::Fanout,
        "headers" => ExchangeKind::Headers,
        other => ExchangeKind::Custom(other.to_string()),
    }
}

/// A JSON argument map as an AMQP table (strings, integers, booleans).
#[must_use]
pub fn arguments(args: &serde_json::Map<String, serde_json::Value>) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in args {
        let value = match v {
            serde_json::Value::String(s) => AMQPValue::LongString(LongString::from(s.as_bytes())),
            serde_json::Value::Bool(b) => AMQPValue::Boolean(*b),
            serde_json::Value::Number(n) => AMQPValue::LongLongInt(n.as_i64().unwrap_or_default()),
            _ => continue,
        };
        t.insert(k.as_str().into(), value);
    }
    t
}

/// Declare everything in `t` on `ch`.
pub async fn declare(ch: &Channel, t: &DesiredTopology) -> Result<()> {
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    };
    for e in &t.exchanges {
        ch.exchange_declare(&e.name, kind(&e.kind), durable, arguments(&e.arguments))
            .await
            .map_err(|err| amqp(format!("declaring exchange {}", e.name), err))?;
    }
    for q in &t.queues {
        ch.queue_declare(
            &q.name,
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            arguments(&q.arguments),
        )
        .await
        .map_err(|err| amqp(format!("declaring queue {}", q.name), err))?;
    }
    for b in &t.bindings {
        let bound = if b.to_exchange {
            ch.exchange_bind(
                &b.destination,
                &b.source,
                &b.key,
                ExchangeBindOptions::default(),
                FieldTable::default(),
            )
            .await
        } else {
            ch.queue_bind(
                &b.destination,
                &b.source,
                &b.key,
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
        };
        bound.map_err(|err| {
            amqp(
                format!("binding {} to {} with {}", b.destination, b.source, b.key),
                err,
            )
        })?;
    }
    Ok(())
}
