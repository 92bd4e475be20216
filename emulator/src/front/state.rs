//! Per-database state kept by the front: the queue catalog (derived from the backend schema),
//! a backend session for the front's own reads, commit notifications, and leases.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tonic::Status;

use super::admission::Admission;
use super::lease::LeaseTable;
use super::sync::lock;
use crate::ddl::Catalog;
use spanner_queues_sql::Dialect;

/// `projects/p/instances/i/databases/d` from a session or database resource name.
pub(crate) fn database_of(resource: &str) -> Result<&str, Status> {
    let mut parts = resource.splitn(7, '/');
    let ok = matches!(
        (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next()
        ),
        (
            Some("projects"),
            Some(_),
            Some("instances"),
            Some(_),
            Some("databases"),
            Some(_)
        )
    );
    if !ok {
        return Err(Status::invalid_argument(format!(
            "invalid resource name: {resource}"
        )));
    }
    // Byte offset of the end of the database id.
    let end = resource
        .match_indices('/')
        .nth(5)
        .map_or(resource.len(), |(i, _)| i);
    Ok(&resource[..end])
}

/// Bound of [`DbState::sending`].
const MAX_SENDING_TRANSACTIONS: usize = 4096;

/// Everything the front keeps about one database.
#[derive(Debug)]
pub(crate) struct DbState {
    pub(crate) name: String,
    pub(crate) catalog: Mutex<CatalogSlot>,
    pub(crate) session: Mutex<Option<String>>,
    /// The session of the front's own read-write reads (see `receive::FrontRead`), apart from
    /// `session` so that a single-use read never meets one of its transactions.
    pub(crate) rw_session: Mutex<Option<String>>,
    /// Bumped after every successful commit and schema change; receivers wait on it.
    pub(crate) changes: tokio::sync::watch::Sender<u64>,
    /// Bumped after every successful commit (any: an ack is one) and every renewal: receive
    /// streams waiting for the client to act on the messages they sent look again.
    pub(crate) settled: tokio::sync::watch::Sender<u64>,
    pub(crate) leases: Mutex<LeaseTable>,
    /// The read-write transaction slot.
    pub(crate) admission: Arc<Admission>,
    /// Transactions that inserted into a queue by DML: their commit wakes receivers.
    sending: Mutex<HashMap<Vec<u8>, SystemTime>>,
    /// Keyed deletes of queue rows held back until their transaction commits (see
    /// `deferred`).
    pub(crate) deferred: Mutex<super::deferred::Deferred>,
    /// Where receivers read the queues from (see `floor`).
    pub(crate) floors: Mutex<super::floor::Floors>,
}

#[derive(Debug, Default)]
pub(crate) struct CatalogSlot {
    pub(crate) catalog: Option<Arc<Catalog>>,
    pub(crate) dialect: Option<Dialect>,
    /// Schema changes forwarded to the backend and not known to be finished: while any is
    /// pending, the catalog is read again from the backend on every use.
    pub(crate) pending_ddl: usize,
}

impl DbState {
    fn new(name: String, admission_wait: Option<Duration>) -> Self {
        Self {
            admission: Arc::new(Admission::new(admission_wait)),
            sending: Mutex::new(HashMap::new()),
            deferred: Mutex::new(super::deferred::Deferred::default()),
            floors: Mutex::new(super::floor::Floors::default()),
            name,
            catalog: Mutex::new(CatalogSlot::default()),
            session: Mutex::new(None),
            rw_session: Mutex::new(None),
            changes: tokio::sync::watch::Sender::new(0),
            settled: tokio::sync::watch::Sender::new(0),
            leases: Mutex::new(LeaseTable::default()),
        }
    }

    /// Transaction `id` inserted into a queue: its commit must wake receivers.
    pub(crate) fn sending(&self, id: &[u8]) {
        let mut sending = lock(&self.sending);
        // Transactions that never commit nor roll back would stay: keep the set small (a
        // forgotten one only means a receiver wakes at its next timer instead of at once).
        if sending.len() >= MAX_SENDING_TRANSACTIONS {
            sending.clear();
        }
        sending.entry(id.to_vec()).or_insert_with(SystemTime::now);
    }

    /// Transaction `id` inserted into a queue messages delivered from `from` on (an explicit
    /// delivery time): its commit must lower the receivers' floors that far.
    pub(crate) fn sending_from(&self, id: &[u8], from: SystemTime) {
        let mut sending = lock(&self.sending);
        if sending.len() >= MAX_SENDING_TRANSACTIONS {
            sending.clear();
        }
        let first = sending.entry(id.to_vec()).or_insert(from);
        *first = (*first).min(from);
    }

    /// Transaction `id` ended: when it first inserted into a queue, if it did.
    pub(crate) fn ended(&self, id: &[u8]) -> Option<SystemTime> {
        lock(&self.sending).remove(id)
    }

    /// Wakes receivers: messages may have become deliverable (a commit sent some) or the
    /// schema changed. Commits that only acknowledge, or write tables, do not call it: every
    /// wake makes each open receive query the queue table again.
    pub(crate) fn notify_change(&self) {
        self.changes.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Wakes receive streams that wait for their client to ack or renew what they sent (a
    /// commit, which may ack, or a renewal happened). Cheap: only streams at their limit of
    /// unsettled messages look, with one keyed read.
    pub(crate) fn notify_settled(&self) {
        self.settled.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Records that the dialect is known (from a CreateDatabase request).
    pub(crate) fn set_dialect(&self, dialect: Dialect) {
        lock(&self.catalog).dialect = Some(dialect);
    }

    /// A schema change was forwarded: read the schema again until [`DbState::ddl_finished`].
    pub(crate) fn ddl_started(&self) {
        let mut slot = lock(&self.catalog);
        slot.pending_ddl += 1;
        slot.catalog = None;
    }

    /// A forwarded schema change finished (successfully or not).
    pub(crate) fn ddl_finished(&self) {
        {
            let mut slot = lock(&self.catalog);
            slot.pending_ddl = slot.pending_ddl.saturating_sub(1);
            slot.catalog = None;
        }
        lock(&self.floors).lower(None);
        self.notify_change();
    }

    /// Forgets a session the backend no longer knows.
    pub(crate) fn drop_session(&self, session: &str) {
        for slot in [&self.session, &self.rw_session] {
            let mut slot = lock(slot);
            if slot.as_deref() == Some(session) {
                *slot = None;
            }
        }
    }
}

/// All databases the front has seen.
#[derive(Debug)]
pub(crate) struct Databases {
    by_name: Mutex<HashMap<String, Arc<DbState>>>,
    admission_wait: Option<Duration>,
}

impl Databases {
    pub(crate) fn new(admission_wait: Option<Duration>) -> Self {
        Self {
            by_name: Mutex::new(HashMap::new()),
            admission_wait,
        }
    }

    /// The state of `database` (a `projects/…/databases/…` name), created on first use.
    pub(crate) fn get(&self, database: &str) -> Arc<DbState> {
        let mut map = lock(&self.by_name);
        Arc::clone(
            map.entry(database.to_owned()).or_insert_with(|| {
                Arc::new(DbState::new(database.to_owned(), self.admission_wait))
            }),
        )
    }

    /// Forgets a dropped database.
    pub(crate) fn remove(&self, database: &str) {
        if let Some(state) = lock(&self.by_name).remove(database) {
            state.notify_change();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_of_session_and_database_names() {
        assert_eq!(
            database_of("projects/p/instances/i/databases/d/sessions/s").unwrap(),
            "projects/p/instances/i/databases/d"
        );
        assert_eq!(
            database_of("projects/p/instances/i/databases/d").unwrap(),
            "projects/p/instances/i/databases/d"
        );
        assert!(database_of("projects/p/instances/i").is_err());
        assert!(database_of("nonsense").is_err());
    }
}
