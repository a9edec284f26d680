//! The audit log: who asked the API for which change, which action they
//! took in a sandbox (an exec, a file written or read, a copy, a tunnel, a
//! download, a gateway call), from which address, and how it ended.
//!
//! Entries of the API's changes are written as they are answered
//! ([`Store::record_audit`]); entries of actions go through a queue
//! ([`Store::queue_audit`]) that one task writes in batches, so that no
//! action (a gateway call on its warm path least of all) waits for the
//! database.

use sqlx::Row;

use super::{Result, Store};

mod queue;

pub(super) use queue::Queue;

/// How an audited request or action ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Done (an answer without an error code; an action answered without
    /// an error).
    Ok,
    /// The caller was refused (`401`, `403`, `429`; a lifecycle control
    /// on the runtime stream).
    Refused,
    /// It failed (an error answer; an action answered with an error).
    Error,
    /// An action that is still running (its entry is updated when it
    /// ends; one that stays `pending` ran when the server stopped).
    Pending,
    /// The stream it ran on ended before its answer.
    Interrupted,
}

impl Outcome {
    /// The outcome as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Refused => "refused",
            Outcome::Error => "error",
            Outcome::Pending => "pending",
            Outcome::Interrupted => "interrupted",
        }
    }

    fn parse(s: &str) -> Outcome {
        match s {
            "refused" => Outcome::Refused,
            "error" => Outcome::Error,
            "pending" => Outcome::Pending,
            "interrupted" => Outcome::Interrupted,
            _ => Outcome::Ok,
        }
    }

    /// The outcome of an HTTP answer: refused for `401`, `403` and `429`,
    /// an error when the server answered an error code, else done.
    pub fn of_answer(status: u16, code: Option<&str>) -> Outcome {
        if matches!(status, 401 | 403 | 429) {
            Outcome::Refused
        } else if code.is_some() {
            Outcome::Error
        } else {
            Outcome::Ok
        }
    }
}

/// One entry of the audit log.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AuditEntry {
    /// Its id: increasing (a page goes on after the last id it showed).
    pub id: i64,
    /// When, in milliseconds since the epoch (an action's: when it
    /// began).
    pub at_ms: i64,
    /// The caller's tenant (none when the request had no valid token).
    pub tenant: Option<String>,
    /// The caller's token, by name (none: no valid token, or the unix
    /// socket).
    pub token: Option<String>,
    /// The client's address: the IP address of the connection's peer
    /// (`unix` for the unix socket; none where it is not known).
    pub client: Option<String>,
    /// The operation: the method and the route (`POST
    /// /v1/sandboxes/{id}/stop`), or the path as asked when no route has
    /// it; or an action (`exec`, `shell`, `fs.write`, `fs.read`,
    /// `copy_in`, `copy_out`, `tunnel`, `console.download`,
    /// `gateway.call`, ...).
    pub operation: String,
    /// The object: for a route, what its parameter names (a sandbox id, a
    /// pool or snapshot name, a target id); for an action, what it acted
    /// on in short (a program's name, never its arguments; a path; a
    /// port).
    pub object: Option<String>,
    /// The sandbox acted on (a gateway call's: its target, a sandbox id
    /// or a URL target's id).
    pub sandbox: Option<String>,
    /// The HTTP status of the answer (none for an action without an HTTP
    /// answer of its own: a request on the runtime stream).
    pub status: Option<u16>,
    /// The error code of an error answer, or of an action that failed.
    pub code: Option<String>,
    /// How it ended.
    pub outcome: Outcome,
    /// The key of a pending action's entry, by which its outcome is
    /// written later (never shown).
    #[serde(skip)]
    pub action: Option<String>,
}

impl AuditEntry {
    /// An entry of `operation` on `object`, now, by nobody in particular:
    /// the caller fills in the rest.
    pub fn new(operation: impl Into<String>, object: Option<String>) -> AuditEntry {
        AuditEntry {
            id: 0,
            at_ms: super::now_ms(),
            tenant: None,
            token: None,
            client: None,
            operation: operation.into(),
            object,
            sandbox: None,
            status: None,
            code: None,
            outcome: Outcome::Ok,
            action: None,
        }
    }
}

/// Which entries a read of the log wants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    /// One tenant's (`None`: every tenant's, and the entries of requests
    /// without one).
    pub tenant: Option<String>,
    /// One sandbox's.
    pub sandbox: Option<String>,
}

/// The columns an entry is written to, in the order [`bind_entry`] binds.
const COLUMNS: &str =
    "at, tenant, token, client, operation, object, sandbox, status, code, outcome, action_id";
/// How many values one entry binds.
const PER_ROW: usize = 11;

fn bind_entry<'q>(
    q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    e: &'q AuditEntry,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    q.bind(e.at_ms)
        .bind(e.tenant.as_deref())
        .bind(e.token.as_deref())
        .bind(e.client.as_deref())
        .bind(e.operation.as_str())
        .bind(e.object.as_deref())
        .bind(e.sandbox.as_deref())
        // No HTTP status: 0 in the table (no answer has it).
        .bind(i32::from(e.status.unwrap_or(0)))
        .bind(e.code.as_deref())
        .bind(e.outcome.as_str())
        .bind(e.action.as_deref())
}

/// `INSERT` of `rows` entries.
fn insert_sql(rows: usize) -> String {
    let values: Vec<String> = (0..rows)
        .map(|r| {
            let ps: Vec<String> = (1..=PER_ROW)
                .map(|c| format!("${}", r * PER_ROW + c))
                .collect();
            format!("({})", ps.join(", "))
        })
        .collect();
    format!(
        "INSERT INTO audit_log ({COLUMNS}) VALUES {}",
        values.join(", ")
    )
}

impl Store {
    /// Appends an entry now (its id is the store's).
    pub async fn record_audit(&self, e: &AuditEntry) -> Result<()> {
        self.record_audits(std::slice::from_ref(e)).await
    }

    /// Appends entries, in one statement.
    pub(super) async fn record_audits(&self, entries: &[AuditEntry]) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let sql = insert_sql(entries.len());
        let mut q = sqlx::query(&sql);
        for e in entries {
            q = bind_entry(q, e);
        }
        let _turn = self.write_turn().await;
        q.execute(&self.pool).await?;
        Ok(())
    }

    /// Writes the outcome of the pending action `action`.
    pub(super) async fn set_audit_outcome(
        &self,
        action: &str,
        outcome: Outcome,
        code: Option<&str>,
    ) -> Result<()> {
        let _turn = self.write_turn().await;
        sqlx::query(
            "UPDATE audit_log SET outcome = $1, code = $2, action_id = NULL \
             WHERE action_id = $3",
        )
        .bind(outcome.as_str())
        .bind(code)
        .bind(action)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Appends an entry soon, in a batch (see the module's doc): waits
    /// only while the queue is full.
    pub async fn queue_audit(&self, e: AuditEntry) {
        self.audit_queue.insert(self, e).await;
    }

    /// Writes, soon, how the pending action `action` (queued with
    /// [`AuditEntry::action`] and [`Outcome::Pending`]) ended.
    pub async fn queue_audit_outcome(
        &self,
        action: String,
        outcome: Outcome,
        code: Option<String>,
    ) {
        self.audit_queue.outcome(self, action, outcome, code).await;
    }

    /// Returns once what was queued before is written (or failed).
    pub async fn flush_audit(&self) {
        self.audit_queue.flush(self).await;
    }

    /// Up to `limit` entries after id `after`, oldest first, of those
    /// `filter` wants.
    pub async fn audit(
        &self,
        filter: &AuditFilter,
        after: i64,
        limit: u32,
    ) -> Result<Vec<AuditEntry>> {
        let q = "SELECT id, at, tenant, token, client, operation, object, sandbox, status, code, \
                 outcome FROM audit_log \
                 WHERE id > $1 AND ($2 = '' OR tenant = $2) AND ($3 = '' OR sandbox = $3) \
                 ORDER BY id LIMIT $4";
        let rows = sqlx::query(q)
            .bind(after)
            .bind(filter.tenant.as_deref().unwrap_or(""))
            .bind(filter.sandbox.as_deref().unwrap_or(""))
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                let status: i32 = r.try_get("status")?;
                let outcome: String = r.try_get("outcome")?;
                Ok(AuditEntry {
                    id: r.try_get("id")?,
                    at_ms: r.try_get("at")?,
                    tenant: r.try_get("tenant")?,
                    token: r.try_get("token")?,
                    client: r.try_get("client")?,
                    operation: r.try_get("operation")?,
                    object: r.try_get("object")?,
                    sandbox: r.try_get("sandbox")?,
                    status: u16::try_from(status).ok().filter(|s| *s != 0),
                    code: r.try_get("code")?,
                    outcome: Outcome::parse(&outcome),
                    action: None,
                })
            })
            .collect()
    }

    /// Deletes the entries older than `before` (milliseconds since the
    /// epoch); how many.
    pub async fn prune_audit(&self, before: i64) -> Result<u64> {
        let _turn = self.write_turn().await;
        let r = sqlx::query("DELETE FROM audit_log WHERE at < $1")
            .bind(before)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testutil::sqlite;

    fn entry(tenant: Option<&str>, at_ms: i64, operation: &str) -> AuditEntry {
        AuditEntry {
            at_ms,
            tenant: tenant.map(str::to_owned),
            token: Some("t".into()),
            status: Some(200),
            ..AuditEntry::new(operation, None)
        }
    }

    fn all() -> AuditFilter {
        AuditFilter::default()
    }

    fn of(tenant: &str) -> AuditFilter {
        AuditFilter {
            tenant: Some(tenant.into()),
            sandbox: None,
        }
    }

    #[tokio::test]
    async fn entries_are_paged_by_id_per_tenant_and_pruned() {
        let (_d, s) = sqlite().await;
        for (i, tenant) in [Some("a"), Some("b"), Some("a"), None, Some("a")]
            .into_iter()
            .enumerate()
        {
            let i = i64::try_from(i).unwrap();
            s.record_audit(&entry(tenant, 1000 + i, &format!("op{i}")))
                .await
                .unwrap();
        }
        let a = s.audit(&of("a"), 0, 2).await.unwrap();
        let ops: Vec<&str> = a.iter().map(|e| e.operation.as_str()).collect();
        assert_eq!(ops, ["op0", "op2"]);
        let next = s.audit(&of("a"), a[1].id, 2).await.unwrap();
        assert_eq!(next.len(), 1);
        assert_eq!(next[0].operation, "op4");
        assert_eq!(s.audit(&all(), 0, 100).await.unwrap().len(), 5);
        assert_eq!(s.prune_audit(1002).await.unwrap(), 2);
        let left = s.audit(&all(), 0, 100).await.unwrap();
        assert_eq!(left.first().map(|e| e.at_ms), Some(1002));
    }

    #[tokio::test]
    async fn every_field_round_trips_and_sandboxes_filter() {
        let (_d, s) = sqlite().await;
        let full = AuditEntry {
            tenant: Some("a".into()),
            token: Some("t".into()),
            client: Some("127.0.0.1".into()),
            sandbox: Some("sb_1".into()),
            status: None,
            code: Some("not_found".into()),
            outcome: Outcome::Error,
            ..AuditEntry::new("exec", Some("ls".into()))
        };
        s.record_audit(&full).await.unwrap();
        let other = AuditEntry {
            sandbox: Some("sb_2".into()),
            status: Some(204),
            ..AuditEntry::new("fs.write", Some("/tmp/x".into()))
        };
        s.record_audit(&other).await.unwrap();
        let filter = AuditFilter {
            tenant: None,
            sandbox: Some("sb_1".into()),
        };
        let got = s.audit(&filter, 0, 10).await.unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(
            AuditEntry {
                id: got[0].id,
                ..full
            },
            got[0]
        );
        let json = serde_json::to_value(&got[0]).unwrap();
        assert_eq!(json["status"], serde_json::Value::Null);
        assert_eq!(json["outcome"], "error");
        assert!(json.get("action").is_none(), "{json}");
    }

    #[test]
    fn answers_have_outcomes() {
        assert_eq!(Outcome::of_answer(200, None), Outcome::Ok);
        assert_eq!(Outcome::of_answer(502, None), Outcome::Ok);
        assert_eq!(Outcome::of_answer(403, Some("forbidden")), Outcome::Refused);
        assert_eq!(Outcome::of_answer(401, None), Outcome::Refused);
        assert_eq!(Outcome::of_answer(404, Some("not_found")), Outcome::Error);
        for o in [
            Outcome::Ok,
            Outcome::Refused,
            Outcome::Error,
            Outcome::Pending,
            Outcome::Interrupted,
        ] {
            assert_eq!(Outcome::parse(o.as_str()), o);
            assert_eq!(serde_json::to_value(o).unwrap(), o.as_str());
        }
    }
}
