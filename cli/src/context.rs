//! What every command gets: the global options, and a way to connect.

use crate::error::CliError;
use crate::output::Format;
use crate::session::Session;

/// The options given before the command.
#[derive(Debug)]
pub(crate) struct Context {
    database: Option<String>,
    json: bool,
}

impl Context {
    /// `--database` (or `SPANNER_QUEUES_DATABASE`) and the global `--json`.
    pub(crate) fn new(database: Option<String>, json: bool) -> Self {
        Self { database, json }
    }

    /// Whether to print JSON: `--json` before the command or after it.
    pub(crate) fn json(&self, format: Format) -> bool {
        self.json || format.json
    }

    /// Whether `--json` was given before the command (`send` takes its payload as `--json`).
    pub(crate) fn global_json(&self) -> bool {
        self.json
    }

    /// Connects to the database.
    pub(crate) async fn connect(&self) -> Result<Session, CliError> {
        Session::connect(self.database.as_deref()).await
    }
}
