//! Deletes, batched: acks that arrive while a `DeleteMessageBatch` is on its way go together
//! in the next one (up to 10), so concurrent handlers share requests without any added wait.
//! Entries the batch reports failed by the service's fault are sent again (a few times, with a
//! short pause); an entry whose receipt no longer owns the message is reported as such (the
//! message will come again: ownership lost); any other failure is that ack's error.

use crate::error::{code_of, is_ownership_lost, kind_of_code, sdk};
use crate::send::copy_error;
use crate::stats::SqsStats;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use postroom_core::{Error, ErrorKind, Result};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// How a delete ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Deleted {
    /// Deleted.
    Yes,
    /// The receipt no longer owns the message (its visibility ran out and it was received
    /// again, or it was deleted already).
    HandleGone,
}

struct Request {
    receipt: String,
    reply: oneshot::Sender<Result<Deleted>>,
}

/// Sends one queue's deletes.
#[derive(Clone, Debug)]
pub(crate) struct Deleter {
    tx: mpsc::UnboundedSender<Request>,
}

/// Rounds of a batch delete (the first send and its repeats).
const ROUNDS: u32 = 4;

impl Deleter {
    /// A deleter for the queue at `url`; its task ends when the last handle is dropped.
    pub(crate) fn start(client: Client, url: String, stats: Arc<SqsStats>) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<Request>();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut batch = vec![first];
                while batch.len() < 10 {
                    match rx.try_recv() {
                        Ok(r) => batch.push(r),
                        Err(_) => break,
                    }
                }
                delete_batch(&client, &url, batch, &stats).await;
            }
        });
        Self { tx }
    }

    /// Delete the message `receipt` owns.
    pub(crate) async fn delete(&self, receipt: &str) -> Result<Deleted> {
        let (reply, answer) = oneshot::channel();
        let closed = || Error::new(ErrorKind::Closed, "the deleter stopped");
        self.tx
            .send(Request {
                receipt: receipt.to_string(),
                reply,
            })
            .map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }
}

async fn delete_batch(client: &Client, url: &str, batch: Vec<Request>, stats: &SqsStats) {
    let mut pending: Vec<Request> = batch;
    let mut last_error = Error::new(ErrorKind::Io, "no delete was sent");
    for round in 0..ROUNDS {
        if round > 0 {
            stats.record_delete_retry(pending.len() as u64);
            tokio::time::sleep(Duration::from_millis(50 << round)).await;
        }
        let entries: Vec<DeleteMessageBatchRequestEntry> = pending
            .iter()
            .enumerate()
            .map(|(i, r)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(format!("d{i}"))
                    .receipt_handle(&r.receipt)
                    .build()
                    .expect("id and receipt are set")
            })
            .collect();
        let out = client
            .delete_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await;
        let out = match out {
            Ok(o) => o,
            Err(e) => {
                let gone = code_of(&e).is_some_and(|(c, m)| is_ownership_lost(c, m));
                let err = sdk(format!("DeleteMessageBatch on {url}"), e);
                if gone || !err.is_transient() {
                    for r in pending {
                        let _ = r.reply.send(if gone {
                            Ok(Deleted::HandleGone)
                        } else {
                            Err(copy_error(&err))
                        });
                    }
                    return;
                }
                last_error = err;
                continue;
            }
        };
        let mut again = Vec::new();
        for (i, r) in pending.into_iter().enumerate() {
            let id = format!("d{i}");
            if out.successful().iter().any(|s| s.id() == id) {
                let _ = r.reply.send(Ok(Deleted::Yes));
                continue;
            }
            match out.failed().iter().find(|f| f.id() == id) {
                Some(f) if is_ownership_lost(f.code(), f.message().unwrap_or("")) => {
                    let _ = r.reply.send(Ok(Deleted::HandleGone));
                }
                Some(f) => {
                    let kind = kind_of_code(f.code(), Some(f.sender_fault()));
                    let err = Error::new(
                        kind,
                        format!(
                            "delete refused: {}: {}",
                            f.code(),
                            f.message().unwrap_or("")
                        ),
                    );
                    if err.is_transient() {
                        last_error = err;
                        again.push(r);
                    } else {
                        let _ = r.reply.send(Err(err));
                    }
                }
                None => again.push(r),
            }
        }
        pending = again;
        if pending.is_empty() {
            return;
        }
    }
    for r in pending {
        let _ = r.reply.send(Err(Error::new(
            last_error.kind(),
            format!(
                "delete kept failing after {ROUNDS} tries: {}",
                last_error.message()
            ),
        )));
    }
}
