//! Sending to one queue with `SendMessageBatch`: at most 10 entries and 1 MiB of bodies and
//! attributes per request, every entry SQS lists in `Failed[]` (or fails to mention) reported
//! as that entry's error, never counted as sent.
//!
//! Requests to one queue go one after another, in the order given, so a FIFO group keeps its
//! order; after an entry fails, later entries of its message group in the same call are not
//! sent (they fail with it, and the caller sends them again in order).

use crate::codec::Encoded;
use crate::config::SQS_MAX_MESSAGE_BYTES;
use crate::error::{kind_of_code, sdk};
use aws_sdk_sqs::Client;
use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchOutput;
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use postroom_core::{Error, ErrorKind, Result};
use std::collections::HashSet;

/// Entries per `SendMessageBatch`.
pub const MAX_BATCH_ENTRIES: usize = 10;

/// One message to one queue.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Body and attributes.
    pub encoded: Encoded,
    /// FIFO message group.
    pub group: Option<String>,
    /// FIFO deduplication id.
    pub dedup: Option<String>,
}

/// A copy of `e` (errors are not `Clone`).
pub(crate) fn copy_error(e: &Error) -> Error {
    Error::new(e.kind(), e.message().to_string())
}

/// A FIFO message group id for `key`: the key itself when SQS takes it (1–128 characters,
/// letters, digits and ASCII punctuation), else a stable hash of it (keys that hash alike
/// share a group: order is still kept, with less parallelism).
#[must_use]
pub fn group_id(key: &str) -> String {
    let ok = |c: char| c.is_ascii_alphanumeric() || c.is_ascii_punctuation();
    if !key.is_empty() && key.len() <= 128 && key.chars().all(ok) {
        return key.to_string();
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("h-{h:016x}")
}

/// Split `entries` into requests of at most 10 entries and 1 MiB.
fn chunks(entries: &[Entry]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, e) in entries.iter().enumerate() {
        let full = i - start == MAX_BATCH_ENTRIES || bytes + e.encoded.size > SQS_MAX_MESSAGE_BYTES;
        if full && i > start {
            out.push(start..i);
            start = i;
            bytes = 0;
        }
        bytes += e.encoded.size;
    }
    if start < entries.len() {
        out.push(start..entries.len());
    }
    out
}

/// Send `entries` to the queue at `url`; one result per entry, in order.
pub async fn send_to_queue(client: &Client, url: &str, entries: &[Entry]) -> Vec<Result<()>> {
    let mut results: Vec<Result<()>> = Vec::with_capacity(entries.len());
    let mut failed_groups: HashSet<String> = HashSet::new();
    for range in chunks(entries) {
        let mut request = client.send_message_batch().queue_url(url);
        let mut sent = Vec::new();
        let mut chunk_results: Vec<Option<Result<()>>> = Vec::new();
        for (n, e) in entries[range.clone()].iter().enumerate() {
            if let Some(g) = e.group.as_ref().filter(|g| failed_groups.contains(*g)) {
                chunk_results.push(Some(Err(Error::new(
                    ErrorKind::Nacked,
                    format!("not sent: an earlier message of group {g} failed in this batch"),
                ))));
                continue;
            }
            let entry = SendMessageBatchRequestEntry::builder()
                .id(format!("e{n}"))
                .message_body(&e.encoded.body)
                .set_message_attributes(Some(e.encoded.attributes.clone()))
                .set_message_group_id(e.group.clone())
                .set_message_deduplication_id(e.dedup.clone())
                .build()
                .expect("id and body are set");
            request = request.entries(entry);
            sent.push(n);
            chunk_results.push(None);
        }
        if !sent.is_empty() {
            match request.send().await {
                Ok(out) => {
                    for (n, r) in entry_results(&out, &sent) {
                        chunk_results[n] = Some(r);
                    }
                }
                Err(e) => {
                    let err = sdk(format!("SendMessageBatch to {url}"), e);
                    for n in &sent {
                        chunk_results[*n] = Some(Err(copy_error(&err)));
                    }
                }
            }
        }
        for (n, r) in chunk_results.into_iter().enumerate() {
            let r = r.unwrap_or_else(|| Err(Error::new(ErrorKind::Io, "no result")));
            if r.is_err()
                && let Some(g) = &entries[range.start + n].group
            {
                failed_groups.insert(g.clone());
            }
            results.push(r);
        }
    }
    results
}

/// The result of each sent entry (by its position in the chunk) from a batch response: listed
/// as successful, listed in `Failed[]` with its code, or not listed at all (an error too).
pub fn entry_results(out: &SendMessageBatchOutput, sent: &[usize]) -> Vec<(usize, Result<()>)> {
    sent.iter()
        .map(|n| {
            let id = format!("e{n}");
            if out.successful().iter().any(|s| s.id() == id) {
                return (*n, Ok(()));
            }
            let r = match out.failed().iter().find(|f| f.id() == id) {
                Some(f) => Err(Error::new(
                    kind_of_code(f.code(), Some(f.sender_fault())),
                    format!(
                        "SQS refused the message: {}{}: {}",
                        f.code(),
                        if f.sender_fault() {
                            ""
                        } else {
                            " (service fault)"
                        },
                        f.message().unwrap_or("")
                    ),
                )),
                None => Err(Error::new(
                    ErrorKind::Io,
                    "SQS's batch response did not mention the message: not counted as sent",
                )),
            };
            (*n, r)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_sqs::types::{BatchResultErrorEntry, SendMessageBatchResultEntry};

    fn entry(size: usize) -> Entry {
        Entry {
            encoded: Encoded {
                body: String::new(),
                attributes: Default::default(),
                size,
            },
            group: None,
            dedup: None,
        }
    }

    #[test]
    fn chunks_hold_ten_entries_and_one_mebibyte() {
        let small: Vec<Entry> = (0..23).map(|_| entry(100)).collect();
        assert_eq!(chunks(&small), vec![0..10, 10..20, 20..23]);
        let big: Vec<Entry> = (0..3).map(|_| entry(400 * 1024)).collect();
        assert_eq!(chunks(&big), vec![0..2, 2..3]);
        assert!(chunks(&[]).is_empty());
    }

    #[test]
    fn every_failed_or_unmentioned_entry_is_an_error() {
        let ok = |id: &str| {
            SendMessageBatchResultEntry::builder()
                .id(id)
                .message_id("m")
                .md5_of_message_body("x")
                .build()
                .unwrap()
        };
        let out = SendMessageBatchOutput::builder()
            .successful(ok("e0"))
            .failed(
                BatchResultErrorEntry::builder()
                    .id("e1")
                    .sender_fault(true)
                    .code("InvalidMessageContents")
                    .message("bad")
                    .build()
                    .unwrap(),
            )
            .failed(
                BatchResultErrorEntry::builder()
                    .id("e2")
                    .sender_fault(false)
                    .code("InternalError")
                    .build()
                    .unwrap(),
            )
            .build()
            .unwrap();
        let r = entry_results(&out, &[0, 1, 2, 3]);
        assert!(r[0].1.is_ok());
        assert_eq!(r[1].1.as_ref().unwrap_err().kind(), ErrorKind::InvalidData);
        assert!(
            r[2].1.as_ref().unwrap_err().is_transient(),
            "the service's fault is retried"
        );
        assert_eq!(r[3].1.as_ref().unwrap_err().kind(), ErrorKind::Io);
    }

    #[test]
    fn group_ids_are_kept_or_hashed() {
        assert_eq!(group_id("order:o-1"), "order:o-1");
        let odd = group_id("order:café 1");
        assert!(odd.starts_with("h-") && odd.len() == 18);
        assert_eq!(odd, group_id("order:café 1"));
        assert!(group_id(&"k".repeat(200)).starts_with("h-"));
    }
}
