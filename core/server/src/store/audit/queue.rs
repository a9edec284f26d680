//! The audit log's queue: entries of actions (gateway calls, requests on
//! the runtime stream, ...) written by one task, in batches, so that no
//! action waits for the database.
//!
//! The writer takes what is queued, waits up to [`LINGER`] for more (up to
//! [`MAX_BATCH`]), then writes the batch's entries in one statement, and
//! the outcomes of pending actions queued earlier (an outcome whose entry
//! is in the same batch is written with it: a short action is one row,
//! written once). The queue holds at most [`CAPACITY`] items: when the
//! database falls that far behind, those who queue wait (nothing is
//! dropped). An entry the database refuses is logged as a warning.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::{AuditEntry, Outcome, Store};

/// Items the queue holds before queuing waits.
const CAPACITY: usize = 4096;
/// The most items one batch takes.
const MAX_BATCH: usize = 128;
/// How long a batch waits for more items after its first.
const LINGER: Duration = Duration::from_millis(20);

enum Queued {
    Insert(AuditEntry),
    Outcome {
        action: String,
        outcome: Outcome,
        code: Option<String>,
    },
    Flush(oneshot::Sender<()>),
}

/// The queue of a [`Store`] (its writer starts at first use).
#[derive(Debug, Clone, Default)]
pub(in crate::store) struct Queue(Arc<OnceLock<mpsc::Sender<Queued>>>);

impl Queue {
    fn sender(&self, store: &Store) -> &mpsc::Sender<Queued> {
        self.0.get_or_init(|| {
            let (tx, rx) = mpsc::channel(CAPACITY);
            tokio::spawn(write(store.clone(), rx));
            tx
        })
    }

    async fn send(&self, store: &Store, item: Queued) {
        if self.sender(store).send(item).await.is_err() {
            tracing::warn!("the audit log's writer is gone: an entry is lost");
        }
    }

    pub(super) async fn insert(&self, store: &Store, e: AuditEntry) {
        self.send(store, Queued::Insert(e)).await;
    }

    pub(super) async fn outcome(
        &self,
        store: &Store,
        action: String,
        outcome: Outcome,
        code: Option<String>,
    ) {
        let item = Queued::Outcome {
            action,
            outcome,
            code,
        };
        self.send(store, item).await;
    }

    pub(super) async fn flush(&self, store: &Store) {
        let (tx, rx) = oneshot::channel();
        self.send(store, Queued::Flush(tx)).await;
        let _ = rx.await;
    }
}

/// The writer: batches until every sender is gone.
async fn write(store: Store, mut rx: mpsc::Receiver<Queued>) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        let linger = tokio::time::sleep(LINGER);
        tokio::pin!(linger);
        while batch.len() < MAX_BATCH && !matches!(batch.last(), Some(Queued::Flush(_))) {
            tokio::select! {
                biased;
                item = rx.recv() => match item {
                    Some(item) => batch.push(item),
                    None => break,
                },
                _ = &mut linger => break,
            }
        }
        apply(&store, batch).await;
    }
}

/// Writes one batch, in the order it was queued: its entries (with the
/// outcomes that came for them meanwhile), then the other outcomes.
async fn apply(store: &Store, batch: Vec<Queued>) {
    let mut inserts: Vec<AuditEntry> = Vec::new();
    let mut outcomes = Vec::new();
    let mut flushed = Vec::new();
    for item in batch {
        match item {
            Queued::Insert(e) => inserts.push(e),
            Queued::Outcome {
                action,
                outcome,
                code,
            } => {
                let queued = inserts
                    .iter_mut()
                    .find(|e| e.action.as_deref() == Some(action.as_str()));
                match queued {
                    Some(e) => {
                        e.outcome = outcome;
                        e.code = code;
                        e.action = None;
                    }
                    None => outcomes.push((action, outcome, code)),
                }
            }
            Queued::Flush(done) => flushed.push(done),
        }
    }
    if let Err(e) = store.record_audits(&inserts).await {
        tracing::warn!(error = %e, entries = inserts.len(), "recording audit entries failed");
    }
    for (action, outcome, code) in outcomes {
        if let Err(e) = store
            .set_audit_outcome(&action, outcome, code.as_deref())
            .await
        {
            tracing::warn!(error = %e, "recording an action's outcome in the audit log failed");
        }
    }
    for done in flushed {
        let _ = done.send(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testutil::sqlite;
    use crate::store::AuditFilter;

    fn pending(key: &str, op: &str) -> AuditEntry {
        AuditEntry {
            outcome: Outcome::Pending,
            action: Some(key.into()),
            ..AuditEntry::new(op, None)
        }
    }

    #[tokio::test]
    async fn queued_entries_are_written_in_order_with_their_outcomes() {
        let (_d, s) = sqlite().await;
        // A short action (its outcome in the same batch), a long one (its
        // outcome after its entry was written), plain entries.
        s.queue_audit(AuditEntry::new("first", None)).await;
        s.queue_audit(pending("k1", "short")).await;
        s.queue_audit(pending("k2", "long")).await;
        s.queue_audit_outcome("k1".into(), Outcome::Ok, None).await;
        s.flush_audit().await;
        let got = s.audit(&AuditFilter::default(), 0, 10).await.unwrap();
        let seen: Vec<(&str, Outcome)> = got
            .iter()
            .map(|e| (e.operation.as_str(), e.outcome))
            .collect();
        assert_eq!(
            seen,
            [
                ("first", Outcome::Ok),
                ("short", Outcome::Ok),
                ("long", Outcome::Pending)
            ]
        );
        s.queue_audit_outcome("k2".into(), Outcome::Error, Some("aborted".into()))
            .await;
        // An outcome for nothing pending changes nothing.
        s.queue_audit_outcome("k9".into(), Outcome::Error, None)
            .await;
        s.flush_audit().await;
        let got = s.audit(&AuditFilter::default(), 0, 10).await.unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(
            (got[2].outcome, got[2].code.as_deref()),
            (Outcome::Error, Some("aborted"))
        );
    }

    #[tokio::test]
    async fn a_burst_larger_than_a_batch_is_written_whole() {
        let (_d, s) = sqlite().await;
        let n = MAX_BATCH * 3 + 7;
        for i in 0..n {
            s.queue_audit(AuditEntry::new(format!("op{i}"), None)).await;
        }
        s.flush_audit().await;
        let got = s.audit(&AuditFilter::default(), 0, 1000).await.unwrap();
        assert_eq!(got.len(), n);
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, e)| e.operation == format!("op{i}")));
    }
}
