//! Fine-grained access control: the `GRANT` statements that give a producer role and a worker
//! role what this crate's statements need, and nothing more.
//!
//! With [fine-grained access control] a process assumes a database role and may touch only what
//! that role was granted. [`Roles`] names a producer role (sends and cancels messages) and a
//! worker role (receives, renews, acks, retries, dead-letters), and
//! [`grant_statements`](Roles::grant_statements) renders the `GRANT` statements for a list of
//! queues, in either dialect. Apply them with the database's DDL, after `CREATE ROLE`:
//!
//! ```
//! use spanner_queues::Dialect;
//! use spanner_queues::grants::Roles;
//! use spanner_queues::ident::QueueName;
//!
//! let roles = Roles::builder()
//!     .with_producer_role("orders_producer")
//!     .with_worker_role("orders_worker")
//!     .build()?;
//! let statements = roles.grant_statements(Dialect::GoogleSql, &[QueueName::new("OrderEmails")?]);
//! assert_eq!(statements[0], "GRANT SELECT ON QUEUE OrderEmails TO ROLE orders_producer");
//! assert!(statements.contains(
//!     &"GRANT EXECUTE ON TABLE FUNCTION RECEIVE_OrderEmails TO ROLE orders_worker".to_owned()
//! ));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What each role gets
//!
//! On each queue:
//!
//! | privilege | producer | worker |
//! |---|---|---|
//! | `INSERT` on the queue | sends | retries and releases (ack and send again, later) |
//! | `DELETE` on the queue | cancels | acks |
//! | `SELECT` on the queue | the cancel's `WHERE` clause | the ack's `WHERE` clause; ordered queues' check for earlier messages |
//! | `EXECUTE` on `RECEIVE_<queue>` | — | receives |
//! | `EXECUTE` on `RENEWLEASE_<queue>` | — | renews leases |
//!
//! On the SDK's tables: the worker gets `SELECT, INSERT, UPDATE, DELETE` on the attempts table
//! and `SELECT, INSERT, UPDATE` on the dead-letter table. With
//! [`with_ordered_queues`](RolesBuilder::with_ordered_queues) the producer gets `SELECT, INSERT,
//! UPDATE` on the sequence counters; with
//! [`with_commit_markers`](RolesBuilder::with_commit_markers), `SELECT, INSERT` on the commit
//! markers (guarded transactions and their resolution).
//!
//! Not granted, because the roles do not need them for this crate: the tables your handlers and
//! your sending transactions write (grant those yourself), and what the dead-letter tools do
//! (listing, replaying and purging dead letters need `SELECT, DELETE` on the dead-letter table,
//! `DELETE` on the attempts table and `INSERT` on the queue; run them as an administrator, or
//! grant a third role those).
//!
//! Statements on a queue grant one privilege each, as Spanner documents them; statements on a
//! table list its privileges.
//!
//! [fine-grained access control]: https://cloud.google.com/spanner/docs/fgac-queues

use std::collections::BTreeSet;

use crate::dialect::Dialect;
use crate::error::{Error, Result};
use crate::ident::{IdentifierKind, IdentifierProblem, QueueName, check_identifier};

/// A privilege of fine-grained access control. The order is the order they are listed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Privilege {
    Select,
    Insert,
    Update,
    Delete,
    Execute,
}

impl Privilege {
    const fn as_str(self) -> &'static str {
        match self {
            Self::Select => "SELECT",
            Self::Insert => "INSERT",
            Self::Update => "UPDATE",
            Self::Delete => "DELETE",
            Self::Execute => "EXECUTE",
        }
    }
}

/// What a privilege is granted on.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Object {
    Queue(QueueName),
    /// `RECEIVE_<queue>` (PostgreSQL: `spanner.receive_<queue>`).
    Receive(QueueName),
    /// `RENEWLEASE_<queue>` (PostgreSQL: `spanner.renewlease_<queue>`).
    RenewLease(QueueName),
    /// One of this crate's tables, by its name in the dialect.
    Table(&'static str),
}

/// One role's privileges on one object.
#[derive(Debug)]
struct Grant<'a> {
    role: &'a str,
    object: Object,
    privileges: BTreeSet<Privilege>,
}

/// A GRANT on a queue names one privilege: Spanner documents `GRANT INSERT ON QUEUE …`,
/// `GRANT DELETE ON QUEUE …` and `GRANT SELECT ON QUEUE …` one at a time, and its `GRANT`
/// grammar lists privileges only for tables, views and functions [?: whether `GRANT SELECT,
/// DELETE ON QUEUE` is accepted is undocumented]. Set to `false` to list them in one statement
/// once that is confirmed.
const ONE_PRIVILEGE_PER_QUEUE_GRANT: bool = true;

/// The producer role and the worker role to grant privileges to, and which of this crate's
/// optional tables the database has.
///
/// Built with [`Roles::builder`]; see the [module docs](self) for what each role gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roles {
    producer: Option<String>,
    worker: Option<String>,
    ordered_queues: bool,
    commit_markers: bool,
}

/// Builds [`Roles`]; [`build`](Self::build) checks the role names.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct RolesBuilder {
    producer: Option<String>,
    worker: Option<String>,
    ordered_queues: bool,
    commit_markers: bool,
}

impl RolesBuilder {
    /// The role of processes that send (and cancel) messages.
    pub fn with_producer_role(mut self, role: impl Into<String>) -> Self {
        self.producer = Some(role.into());
        self
    }

    /// The role of processes that run workers or receivers.
    pub fn with_worker_role(mut self, role: impl Into<String>) -> Self {
        self.worker = Some(role.into());
        self
    }

    /// Whether some of the queues are ordered (`#[queue(ordered)]`): the producer then also
    /// reads and writes the sequence counter table, which must exist. Off by default.
    pub fn with_ordered_queues(mut self, ordered: bool) -> Self {
        self.ordered_queues = ordered;
        self
    }

    /// Whether the producer runs guarded transactions: it then also writes and reads the
    /// commit-marker table, which must exist. Off by default.
    pub fn with_commit_markers(mut self, markers: bool) -> Self {
        self.commit_markers = markers;
        self
    }

    /// Checks the role names.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] (`producer_role` or `worker_role`) for a name that is not a
    /// role name (1 to 128 ASCII letters, digits and underscores, starting with a letter) or
    /// that names a system role (`public`, or starting with `spanner_`); and (`roles`) when
    /// neither role is set. Nothing is sent to Spanner.
    pub fn build(self) -> Result<Roles> {
        if self.producer.is_none() && self.worker.is_none() {
            return Err(Error::InvalidSetting {
                setting: "roles",
                reason: "set a producer role, a worker role, or both".into(),
            });
        }
        for (setting, role) in [
            ("producer_role", &self.producer),
            ("worker_role", &self.worker),
        ] {
            if let Some(role) = role {
                check_role(role).map_err(|reason| Error::InvalidSetting {
                    setting,
                    reason: format!("`{role}` is not a role name: {reason}"),
                })?;
            }
        }
        Ok(Roles {
            producer: self.producer,
            worker: self.worker,
            ordered_queues: self.ordered_queues,
            commit_markers: self.commit_markers,
        })
    }
}

/// Why `role` cannot be granted to, if it cannot.
///
/// [I] Spanner documents no separate naming rule for roles; this takes its rule for schema
/// object names. [C] `public`, `spanner_info_reader` and `spanner_sys_reader` are system
/// roles, and `public` is every fine-grained user's: granting it these privileges would give
/// them to everyone. [I] The whole `spanner_` prefix is kept for system roles. Change the rule
/// here if Spanner's differs.
fn check_role(role: &str) -> std::result::Result<(), &'static str> {
    match check_identifier(IdentifierKind::Table, role) {
        Ok(()) => {}
        Err(IdentifierProblem::Empty) => return Err("it is empty"),
        Err(IdentifierProblem::TooLong) => return Err("it is longer than 128 characters"),
        Err(IdentifierProblem::InvalidStart) => {
            return Err("it must start with an ASCII letter");
        }
        Err(_) => return Err("it may contain only ASCII letters, digits and underscores"),
    }
    let lower = role.to_ascii_lowercase();
    if lower == "public" || lower.starts_with("spanner_") {
        return Err("it is a system role");
    }
    Ok(())
}

impl Roles {
    /// A builder with no role set.
    pub fn builder() -> RolesBuilder {
        RolesBuilder::default()
    }

    /// The producer role, if set.
    pub fn producer_role(&self) -> Option<&str> {
        self.producer.as_deref()
    }

    /// The worker role, if set.
    pub fn worker_role(&self) -> Option<&str> {
        self.worker.as_deref()
    }

    /// These roles, also granted what the tables of `setup` need: the sequence counter table
    /// when it has an ordered queue, the commit-marker table when it has them.
    pub(crate) fn for_tables(mut self, ordered_queues: bool, commit_markers: bool) -> Self {
        self.ordered_queues |= ordered_queues;
        self.commit_markers |= commit_markers;
        self
    }

    /// The `GRANT` statements for these roles on `queues` (duplicates are granted once) and on
    /// this crate's tables, in `dialect`, without the final `;`: the producer role's first,
    /// then the worker role's. When both roles have the same name, each privilege is granted
    /// once.
    ///
    /// The roles must exist (`CREATE ROLE`), and so must the queues and tables named. Queue
    /// and table names appear as [`QueueName::to_sql`] renders them in statements (PostgreSQL:
    /// lower case), role names too.
    pub fn grant_statements<'q>(
        &self,
        dialect: Dialect,
        queues: impl IntoIterator<Item = &'q QueueName>,
    ) -> Vec<String> {
        let mut unique: Vec<&QueueName> = Vec::new();
        for queue in queues {
            if !unique.contains(&queue) {
                unique.push(queue);
            }
        }
        let mut grants: Vec<Grant<'_>> = Vec::new();
        if let Some(role) = &self.producer {
            self.producer_grants(&mut grants, role, dialect, &unique);
        }
        if let Some(role) = &self.worker {
            worker_grants(&mut grants, role, dialect, &unique);
        }
        grants
            .iter()
            .flat_map(|grant| render(grant, dialect))
            .collect()
    }

    /// Each privilege comes with the statements of this crate that need it.
    fn producer_grants<'a>(
        &self,
        grants: &mut Vec<Grant<'a>>,
        role: &'a str,
        dialect: Dialect,
        queues: &[&QueueName],
    ) {
        use Privilege::*;
        for queue in queues {
            add(
                grants,
                role,
                Object::Queue((*queue).clone()),
                [
                    // `INSERT INTO <queue> (…) VALUES …`: every send (`Queue::insert_statement`).
                    Insert,
                    // `DELETE FROM <queue> WHERE <key> = …`: a cancel (`Queue::cancel`).
                    Delete,
                    // The cancel's `WHERE` clause reads the key columns: Spanner requires
                    // `SELECT` on the columns a `DELETE`'s `WHERE` names [C for tables, in its
                    // privileges reference; I that queues follow the rule, having no
                    // column-level privileges]. Drop it here if a cancel works without it.
                    Select,
                ],
            );
        }
        if self.ordered_queues {
            let table = crate::tables::sequences(dialect);
            // `ordering::assign`, in every send to an ordered queue: a keyed read of the
            // counter rows (`SELECT`) and an `InsertOrUpdate` mutation of them (`INSERT` and
            // `UPDATE` [I: a mutation that may do either needs both]).
            add(grants, role, Object::Table(table), [Select, Insert, Update]);
        }
        if self.commit_markers {
            let table = crate::tables::commit_markers(dialect);
            // A guarded transaction's `INSERT INTO <markers> (Id, CommittedAt) VALUES …`
            // (`CommitMarkers::insert_statement`), and its resolution's `SELECT CommittedAt
            // FROM <markers> WHERE Id = …` (`CommitMarkers::select_statement`).
            add(grants, role, Object::Table(table), [Insert, Select]);
        }
    }
}

/// The worker role's privileges, each with the statements of this crate that need it.
fn worker_grants<'a>(
    grants: &mut Vec<Grant<'a>>,
    role: &'a str,
    dialect: Dialect,
    queues: &[&QueueName],
) {
    use Privilege::*;
    for queue in queues {
        add(
            grants,
            role,
            Object::Queue((*queue).clone()),
            [
                // `DELETE FROM <queue> WHERE <key> = … ASSERT_ROWS_MODIFIED 1`: every ack
                // (`Queue::ack_key`: handlers' acks, dead-lettering, releases).
                Delete,
                // The ack's `WHERE` clause (see the producer's cancel), and, for ordered
                // queues, the keyed read of earlier messages of the same ordering key
                // (`ordering::earlier_in_queue`).
                Select,
                // `INSERT INTO <queue> …`: a retry or release sends the message again with a
                // later `DeliverTime` in the ack's transaction (`Queue::send_raw` from
                // `release_in`, the worker's retries, ordered queues' waiting messages, the
                // receiver's unhandled rows at shutdown).
                Insert,
            ],
        );
        // `SELECT * FROM RECEIVE_<queue>(…)` (`receive::receive_statement`).
        add(grants, role, Object::Receive((*queue).clone()), [Execute]);
        // `SELECT * FROM RENEWLEASE_<queue>(lease_tokens => …)` (`receive::lease`).
        add(
            grants,
            role,
            Object::RenewLease((*queue).clone()),
            [Execute],
        );
    }
    // Not granted: `UPDATE` on the queue. A failed ack buffers an update of the missing row as
    // a fuse that must fail the commit (`Queue::blow_fuse`); without `UPDATE` the commit fails
    // all the same.
    let (attempts, dead_letters) = (
        crate::tables::attempts(dialect),
        crate::tables::dead_letters(dialect),
    );
    add(
        grants,
        role,
        Object::Table(attempts),
        [
            // `SELECT COUNT(*) FROM <attempts> WHERE …` (`count_attempts`) and the keyed read of
            // a round's attempt rows (`start_attempts`).
            Select,
            // `InsertOrUpdate` of an attempt row: an external handler's attempt as it starts,
            // a failed attempt's error (`attempt_row`) [I: needs both].
            Insert, Update,
            // Delete mutations of a message's attempt rows when it is acked or dead-lettered,
            // or of an attempt that does not count (`buffer_rows`, `dead_letter`).
            Delete,
        ],
    );
    add(
        grants,
        role,
        Object::Table(dead_letters),
        [
            // Ordered queues: the keyed read of the queue's dead letters
            // (`worker::ordered::dead_letter_before`).
            Select,
            // `InsertOrUpdate` of a dead letter (`dead_letter`) [I: needs both].
            Insert, Update,
        ],
    );
}

/// Adds `privileges` on `object` to `role`'s grants, merging with a grant already there.
fn add<'a>(
    grants: &mut Vec<Grant<'a>>,
    role: &'a str,
    object: Object,
    privileges: impl IntoIterator<Item = Privilege>,
) {
    match grants
        .iter_mut()
        .find(|g| g.role == role && g.object == object)
    {
        Some(grant) => grant.privileges.extend(privileges),
        None => grants.push(Grant {
            role,
            object,
            privileges: privileges.into_iter().collect(),
        }),
    }
}

/// The statements of one grant in `dialect`.
///
/// GoogleSQL: `GRANT … ON { QUEUE | TABLE | TABLE FUNCTION } … TO ROLE <role>`; PostgreSQL:
/// `GRANT … ON { QUEUE | TABLE | FUNCTION } … TO <role>` [C: Spanner's pages on fine-grained
/// access control for queues and its privileges reference].
fn render(grant: &Grant<'_>, dialect: Dialect) -> Vec<String> {
    let role = crate::ident::quote_identifier(grant.role, dialect);
    let grantee = match dialect {
        Dialect::GoogleSql => format!("ROLE {role}"),
        Dialect::PostgreSql => role,
    };
    let list = |privileges: &mut dyn Iterator<Item = &Privilege>| {
        privileges
            .map(|p| p.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let statement = |privileges: &str, on: &str| format!("GRANT {privileges} ON {on} TO {grantee}");
    match &grant.object {
        Object::Queue(queue) => {
            let on = format!("QUEUE {}", queue.to_sql(dialect));
            if ONE_PRIVILEGE_PER_QUEUE_GRANT {
                grant
                    .privileges
                    .iter()
                    .map(|p| statement(p.as_str(), &on))
                    .collect()
            } else {
                vec![statement(&list(&mut grant.privileges.iter()), &on)]
            }
        }
        Object::Receive(queue) | Object::RenewLease(queue) => {
            let function = match &grant.object {
                Object::Receive(_) => queue.receive_function(dialect),
                _ => queue.renew_lease_function(dialect),
            };
            let on = match dialect {
                Dialect::GoogleSql => format!("TABLE FUNCTION {function}"),
                Dialect::PostgreSql => format!("FUNCTION {function}"),
            };
            vec![statement(&list(&mut grant.privileges.iter()), &on)]
        }
        Object::Table(table) => {
            vec![statement(
                &list(&mut grant.privileges.iter()),
                &format!("TABLE {table}"),
            )]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queues(names: &[&str]) -> Vec<QueueName> {
        names
            .iter()
            .map(|n| QueueName::new(*n).expect("valid"))
            .collect()
    }

    fn both() -> Roles {
        Roles::builder()
            .with_producer_role("app_producer")
            .with_worker_role("app_worker")
            .build()
            .expect("valid roles")
    }

    #[test]
    fn google_sql_statements_for_both_roles() {
        let statements = both().grant_statements(Dialect::GoogleSql, &queues(&["OrderEmails"]));
        assert_eq!(
            statements,
            [
                "GRANT SELECT ON QUEUE OrderEmails TO ROLE app_producer",
                "GRANT INSERT ON QUEUE OrderEmails TO ROLE app_producer",
                "GRANT DELETE ON QUEUE OrderEmails TO ROLE app_producer",
                "GRANT SELECT ON QUEUE OrderEmails TO ROLE app_worker",
                "GRANT INSERT ON QUEUE OrderEmails TO ROLE app_worker",
                "GRANT DELETE ON QUEUE OrderEmails TO ROLE app_worker",
                "GRANT EXECUTE ON TABLE FUNCTION RECEIVE_OrderEmails TO ROLE app_worker",
                "GRANT EXECUTE ON TABLE FUNCTION RENEWLEASE_OrderEmails TO ROLE app_worker",
                "GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE SpannerQueuesAttempts TO ROLE app_worker",
                "GRANT SELECT, INSERT, UPDATE ON TABLE SpannerQueuesDeadLetters TO ROLE app_worker",
            ]
        );
    }

    #[test]
    fn postgresql_statements_for_both_roles() {
        let statements = both().grant_statements(Dialect::PostgreSql, &queues(&["OrderEmails"]));
        assert_eq!(
            statements,
            [
                "GRANT SELECT ON QUEUE orderemails TO app_producer",
                "GRANT INSERT ON QUEUE orderemails TO app_producer",
                "GRANT DELETE ON QUEUE orderemails TO app_producer",
                "GRANT SELECT ON QUEUE orderemails TO app_worker",
                "GRANT INSERT ON QUEUE orderemails TO app_worker",
                "GRANT DELETE ON QUEUE orderemails TO app_worker",
                "GRANT EXECUTE ON FUNCTION spanner.receive_orderemails TO app_worker",
                "GRANT EXECUTE ON FUNCTION spanner.renewlease_orderemails TO app_worker",
                "GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE spanner_queues_attempts TO app_worker",
                "GRANT SELECT, INSERT, UPDATE ON TABLE spanner_queues_dead_letters TO app_worker",
            ]
        );
    }

    #[test]
    fn optional_tables_go_to_the_producer() {
        let roles = Roles::builder()
            .with_producer_role("Sender")
            .with_ordered_queues(true)
            .with_commit_markers(true)
            .build()
            .expect("valid");
        assert_eq!(
            roles.grant_statements(Dialect::GoogleSql, &queues(&["Turns"])),
            [
                "GRANT SELECT ON QUEUE Turns TO ROLE Sender",
                "GRANT INSERT ON QUEUE Turns TO ROLE Sender",
                "GRANT DELETE ON QUEUE Turns TO ROLE Sender",
                "GRANT SELECT, INSERT, UPDATE ON TABLE SpannerQueuesSequences TO ROLE Sender",
                "GRANT SELECT, INSERT ON TABLE SpannerQueuesCommitMarkers TO ROLE Sender",
            ]
        );
        assert_eq!(
            roles.grant_statements(Dialect::PostgreSql, &queues(&["Turns"]))[3..],
            [
                "GRANT SELECT, INSERT, UPDATE ON TABLE spanner_queues_sequences TO sender",
                "GRANT SELECT, INSERT ON TABLE spanner_queues_commit_markers TO sender",
            ]
        );
    }

    #[test]
    fn queues_in_order_duplicates_once_and_no_queue_leaves_the_tables() {
        let worker = Roles::builder()
            .with_worker_role("w")
            .build()
            .expect("valid");
        let statements = worker.grant_statements(Dialect::GoogleSql, &queues(&["B", "A", "B"]));
        let functions: Vec<&String> = statements
            .iter()
            .filter(|s| s.contains("RECEIVE_"))
            .collect();
        assert_eq!(
            functions,
            [
                "GRANT EXECUTE ON TABLE FUNCTION RECEIVE_B TO ROLE w",
                "GRANT EXECUTE ON TABLE FUNCTION RECEIVE_A TO ROLE w",
            ]
        );
        assert_eq!(statements.len(), 2 * 5 + 2);
        assert_eq!(
            worker.grant_statements(Dialect::GoogleSql, &[]),
            [
                "GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE SpannerQueuesAttempts TO ROLE w",
                "GRANT SELECT, INSERT, UPDATE ON TABLE SpannerQueuesDeadLetters TO ROLE w",
            ]
        );
    }

    #[test]
    fn one_role_for_both_gets_each_privilege_once() {
        let one = Roles::builder()
            .with_producer_role("app")
            .with_worker_role("app")
            .build()
            .expect("valid");
        let statements = one.grant_statements(Dialect::GoogleSql, &queues(&["Q"]));
        let mut unique = statements.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), statements.len(), "{statements:#?}");
        assert_eq!(statements.len(), 3 + 2 + 2, "{statements:#?}");
    }

    #[test]
    fn reserved_words_are_quoted_as_in_the_schema() {
        let roles = Roles::builder()
            .with_producer_role("Select")
            .build()
            .expect("a keyword is a valid name");
        assert_eq!(
            roles.grant_statements(Dialect::GoogleSql, &queues(&["Order"]))[0],
            "GRANT SELECT ON QUEUE `Order` TO ROLE `Select`"
        );
        assert_eq!(
            roles.grant_statements(Dialect::PostgreSql, &queues(&["Order"]))[0],
            "GRANT SELECT ON QUEUE \"order\" TO \"select\""
        );
    }

    #[test]
    fn bad_role_names_are_invalid_settings() {
        let setting = |builder: RolesBuilder| match builder.build() {
            Err(Error::InvalidSetting { setting, reason }) => (setting, reason),
            other => panic!("expected InvalidSetting, got {other:?}"),
        };
        let (name, reason) = setting(Roles::builder());
        assert_eq!(name, "roles");
        assert!(reason.contains("producer role"), "{reason}");
        for (role, expected) in [
            ("", "it is empty"),
            ("1st", "start with an ASCII letter"),
            ("app-worker", "only ASCII letters"),
            ("spanner_info_reader", "system role"),
            ("PUBLIC", "system role"),
        ] {
            let (name, reason) = setting(Roles::builder().with_worker_role(role));
            assert_eq!(name, "worker_role");
            assert!(reason.contains(expected), "{role}: {reason}");
            assert!(reason.contains(&format!("`{role}`")), "{reason}");
        }
        let (name, _) = setting(Roles::builder().with_producer_role("r".repeat(129)));
        assert_eq!(name, "producer_role");
        assert!(
            Roles::builder()
                .with_producer_role("r".repeat(128))
                .build()
                .is_ok()
        );
    }
}
