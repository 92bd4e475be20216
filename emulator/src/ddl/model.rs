//! The model: columns, queues and tables as the front knows them, and how a queue renders as
//! backend and client DDL in either dialect.

use std::borrow::Cow;

use spanner_queues_sql::{Dialect, quote_ident, quote_ident_always, quote_string};

use super::metadata::{QueueMeta, encode_meta};
use super::{
    DELIVER_TIME_COLUMN, DUE_INDEX_PREFIX, MESSAGE_ID_COLUMN, META_COLUMN, PG_DELIVER_TIME_COLUMN,
};

/// How the front writes names into SQL, by where the name comes from:
///
/// - a name of the client's statement goes into the backend statement that replaces it as the
///   client wrote it (quoted, or bare: the `written` fields), so that the official emulator
///   accepts or refuses it as Cloud Spanner would (which words are reserved depends on the
///   position: `constraint` is a fine column name, and PostgreSQL-dialect DDL reserves `ttl`);
/// - a name the front takes from its catalog, in statements it writes itself, is quoted where
///   the dialect needs it (this function);
/// - a name shown to clients (`GetDatabaseDdl`) is quoted when it is a reserved keyword or not
///   a plain word (`quote_ident`), close to how the official emulator prints tables.
pub(crate) fn generated_name(dialect: Dialect, name: &str) -> Cow<'_, str> {
    match dialect {
        // The GoogleSQL list is the whole story in every position: the keyword test checks the
        // official emulator's DDL against it.
        Dialect::GoogleSql => quote_ident(dialect, name),
        // Spanner's PostgreSQL dialect reserves more than PostgreSQL does (`ttl` and `synonym`
        // in DDL, measured on the official emulator): quote every name.
        Dialect::PostgreSql => Cow::Owned(quote_ident_always(dialect, name)),
    }
}

/// One column definition, as parsed from DDL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ColumnDef {
    /// The column name, unquoted.
    pub(crate) name: String,
    /// The name as the statement that declared the column wrote it (see [`generated_name`]).
    pub(crate) written: String,
    /// The type, normalised: `INT64`, `STRING(36)`, `ARRAY<STRING(MAX)>`, `my.pkg.Msg`.
    pub(crate) data_type: String,
    /// Whether the column is `NOT NULL`.
    pub(crate) not_null: bool,
    /// The expression of `AS ( expression )`, for a generated column.
    pub(crate) generated: Option<String>,
    /// Whether a generated column is `STORED`.
    pub(crate) stored: bool,
    /// The expression of `DEFAULT ( expression )` (never set on queue columns).
    pub(crate) default: Option<String>,
    /// Whether the column is `HIDDEN` (left out of `SELECT *`).
    pub(crate) hidden: bool,
    /// Column options (`allow_commit_timestamp = true`): name and value as written.
    pub(crate) options: Vec<(String, String)>,
}

impl ColumnDef {
    /// The column definition as one line of backend GoogleSQL DDL, its name as written, e.g.
    /// `UserId INT64 NOT NULL`.
    pub(crate) fn definition(&self) -> String {
        self.render_named(&self.written, false)
    }

    /// Renders the definition for clients; `multiline_options` prints `OPTIONS` the way the
    /// emulator's `GetDatabaseDdl` does (one option per line).
    pub(super) fn render(&self, multiline_options: bool) -> String {
        self.render_named(
            &quote_ident(Dialect::GoogleSql, &self.name),
            multiline_options,
        )
    }

    /// Renders the definition with the name written as `name`.
    fn render_named(&self, name: &str, multiline_options: bool) -> String {
        let mut out = format!("{name} {}", self.data_type);
        if self.not_null {
            out.push_str(" NOT NULL");
        }
        if let Some(default) = &self.default {
            out.push_str(&format!(" DEFAULT ({default})"));
        }
        if let Some(expr) = &self.generated {
            out.push_str(&format!(" AS ({expr})"));
            if self.stored {
                out.push_str(" STORED");
            }
        }
        if self.hidden {
            out.push_str(" HIDDEN");
        }
        if !self.options.is_empty() {
            let items: Vec<String> = self
                .options
                .iter()
                .map(|(name, value)| format!("{name} = {value}"))
                .collect();
            if multiline_options {
                out.push_str(&format!(" OPTIONS (\n    {}\n  )", items.join(",\n    ")));
            } else {
                out.push_str(&format!(" OPTIONS ({})", items.join(", ")));
            }
        }
        out
    }
}

/// A key column of a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyColumn {
    /// The column's definition.
    pub(crate) column: ColumnDef,
    /// The name as the `PRIMARY KEY` clause writes it.
    pub(crate) written: String,
    /// Whether the primary key orders this column `DESC`.
    pub(crate) descending: bool,
}

/// The SQL type family of a queue's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PayloadKind {
    /// `BYTES(n)` / `BYTES(MAX)`.
    Bytes,
    /// `STRING(n)` / `STRING(MAX)`.
    String,
    /// `JSON`.
    Json,
    /// A proto message type.
    Proto,
}

/// The payload column of a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PayloadColumn {
    /// The column's definition (its name is `Payload` in some letter case).
    pub(crate) column: ColumnDef,
    /// The type family.
    pub(crate) kind: PayloadKind,
}

/// The `ON DELETE` action of an `INTERLEAVE IN PARENT` clause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnDelete {
    /// `ON DELETE CASCADE`: deleting the parent row deletes the queue's messages under it.
    Cascade,
    /// `ON DELETE NO ACTION`: a parent row with messages cannot be deleted.
    NoAction,
}

impl OnDelete {
    /// The DDL spelling.
    pub(super) fn sql(self) -> &'static str {
        match self {
            OnDelete::Cascade => "CASCADE",
            OnDelete::NoAction => "NO ACTION",
        }
    }
}

/// An `INTERLEAVE IN [PARENT] table [ON DELETE ...]` clause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Interleave {
    /// The parent table, unquoted.
    pub(crate) parent: String,
    /// The parent as the clause writes it (quoted, or bare).
    pub(crate) parent_written: String,
    /// `true` for `INTERLEAVE IN PARENT` (enforced by the backend), `false` for `INTERLEAVE IN`
    /// (only remembered: see the module docs).
    pub(crate) in_parent: bool,
    /// The `ON DELETE` action, when written (the backend prints `NO ACTION` when omitted).
    pub(crate) on_delete: Option<OnDelete>,
}

impl Interleave {
    /// The clause as clients see it, e.g. `INTERLEAVE IN PARENT Users ON DELETE CASCADE`.
    pub(super) fn sql(&self) -> String {
        self.sql_naming(&quote_ident(Dialect::GoogleSql, &self.parent))
    }

    /// The clause with the parent written as `parent`.
    fn sql_naming(&self, parent: &str) -> String {
        let mut out = String::from("INTERLEAVE IN ");
        if self.in_parent {
            out.push_str("PARENT ");
        }
        out.push_str(parent);
        if let Some(action) = self.on_delete {
            out.push_str(" ON DELETE ");
            out.push_str(action.sql());
        }
        out
    }
}

/// The only value of the `receive_mode` option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum ReceiveMode {
    /// `'PULL'`: messages are received with `RECEIVE_<Q>`.
    #[default]
    Pull,
}

/// The options of a queue. `None` means "not set explicitly" (the default applies and
/// `GetDatabaseDdl` does not print the option).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct QueueOptions {
    /// `receive_mode`.
    pub(crate) receive_mode: Option<ReceiveMode>,
    /// `disable_send`.
    pub(crate) disable_send: Option<bool>,
    /// `disable_delivery`.
    pub(crate) disable_delivery: Option<bool>,
    /// `locality_group` (remembered, no effect in the emulator).
    pub(crate) locality_group: Option<String>,
}

impl QueueOptions {
    /// Whether sends (Mutation.Send, INSERT) are refused.
    pub(crate) fn send_disabled(&self) -> bool {
        self.disable_send.unwrap_or(false)
    }

    /// Whether RECEIVE delivers nothing.
    pub(crate) fn delivery_disabled(&self) -> bool {
        self.disable_delivery.unwrap_or(false)
    }

    /// The explicitly set options as `name = value` items, in a fixed order.
    pub(super) fn items(&self) -> Vec<String> {
        let mut items = Vec::new();
        if let Some(ReceiveMode::Pull) = self.receive_mode {
            items.push("receive_mode = 'PULL'".to_owned());
        }
        if let Some(v) = self.disable_send {
            items.push(format!("disable_send = {v}"));
        }
        if let Some(v) = self.disable_delivery {
            items.push(format!("disable_delivery = {v}"));
        }
        if let Some(v) = &self.locality_group {
            items.push(format!(
                "locality_group = {}",
                quote_string(Dialect::GoogleSql, v)
            ));
        }
        items
    }
}

/// One queue, as the front knows it (derived from the backend schema).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueueDef {
    /// The queue name, unquoted, as declared. The backend table has the same name.
    pub(crate) name: String,
    /// The name as the statement that declared the queue wrote it (quoted, or bare).
    pub(crate) written_name: String,
    /// The key columns in PRIMARY KEY order.
    pub(crate) key_columns: Vec<KeyColumn>,
    /// The payload column.
    pub(crate) payload: PayloadColumn,
    /// The interleaving clause, if any.
    pub(crate) interleave: Option<Interleave>,
    /// The row deletion policy, without the surrounding parentheses, e.g.
    /// `OLDER_THAN(DeliverTime, INTERVAL 7 DAY)`.
    pub(crate) row_deletion_policy: Option<String>,
    /// The queue options.
    pub(crate) options: QueueOptions,
    /// User column names in declaration order (keys and payload), for rendering.
    pub(super) column_order: Vec<String>,
    /// The dialect of the database holding the queue (decides names and DDL syntax).
    pub(crate) dialect: Dialect,
    /// Whether the backend has the queue's index on its delivery time ([`QueueDef::due_index`]).
    /// Queues created by an older front, or in PostgreSQL databases, have none: their
    /// receivers scan the table.
    pub(crate) has_due_index: bool,
}

impl QueueDef {
    /// The name of the system column holding the delivery time: `DeliverTime` (GoogleSQL) or
    /// `deliver_time` (PostgreSQL).
    pub(crate) fn deliver_time_column(&self) -> &'static str {
        match self.dialect {
            Dialect::GoogleSql => DELIVER_TIME_COLUMN,
            Dialect::PostgreSql => PG_DELIVER_TIME_COLUMN,
        }
    }

    /// The queue name quoted for SQL the front writes, in the queue's dialect.
    pub(crate) fn quoted_name(&self) -> String {
        self.quote(&self.name)
    }

    /// `name` quoted as an identifier for SQL the front writes, in the queue's dialect (see
    /// [`generated_name`]).
    pub(crate) fn quote(&self, name: &str) -> String {
        generated_name(self.dialect, name).into_owned()
    }

    /// The key column called `name` (case-insensitive), if any.
    #[cfg(test)]
    pub(crate) fn key_column(&self, name: &str) -> Option<&KeyColumn> {
        self.key_columns
            .iter()
            .find(|k| k.column.name.eq_ignore_ascii_case(name))
    }

    /// The user columns (keys and payload) in declaration order.
    pub(crate) fn declared_columns(&self) -> impl Iterator<Item = &ColumnDef> {
        self.column_order.iter().filter_map(|name| {
            if self.payload.column.name == *name {
                Some(&self.payload.column)
            } else {
                self.key_columns
                    .iter()
                    .find(|k| k.column.name == *name)
                    .map(|k| &k.column)
            }
        })
    }

    /// The `PRIMARY KEY (...)` column list, each name as `name` writes it.
    fn key_list(&self, name: impl Fn(&KeyColumn) -> String) -> String {
        let parts: Vec<String> = self
            .key_columns
            .iter()
            .map(|k| {
                let name = name(k);
                if k.descending {
                    format!("{name} DESC")
                } else {
                    name
                }
            })
            .collect();
        parts.join(", ")
    }

    /// The metadata that the backend schema cannot hold.
    pub(super) fn meta(&self) -> QueueMeta {
        QueueMeta {
            receive_mode: self
                .options
                .receive_mode
                .map(|ReceiveMode::Pull| "PULL".to_owned()),
            disable_send: self.options.disable_send,
            disable_delivery: self.options.disable_delivery,
            locality_group: self.options.locality_group.clone(),
            interleave_in: self
                .interleave
                .as_ref()
                .filter(|i| !i.in_parent)
                .map(|i| i.parent.clone()),
            hidden: self
                .declared_columns()
                .filter(|c| c.hidden)
                .map(|c| c.name.clone())
                .collect(),
        }
    }

    /// The name of the queue table's hidden index on its delivery time, which lets receivers
    /// read the messages from a delivery time on without scanning every deleted row the
    /// official emulator keeps. GoogleSQL queues outside named schemas only (the name must
    /// fit in 128 characters).
    pub(crate) fn due_index(&self) -> Option<String> {
        let name = format!("{DUE_INDEX_PREFIX}{}", self.name);
        (self.dialect == Dialect::GoogleSql && !self.name.contains('.') && name.len() <= 128)
            .then_some(name)
    }

    /// The backend `CREATE INDEX` of [`QueueDef::due_index`], if the queue has one.
    pub(crate) fn backend_create_due_index(&self, if_not_exists: bool) -> Option<String> {
        let index = self.due_index()?;
        Some(format!(
            "CREATE INDEX {}{} ON {} ({DELIVER_TIME_COLUMN}) STORING ({MESSAGE_ID_COLUMN})",
            if if_not_exists { "IF NOT EXISTS " } else { "" },
            quote_ident(Dialect::GoogleSql, &index),
            self.quoted_name()
        ))
    }

    /// The backend `CREATE TABLE` statement for this queue, its names as the client's
    /// `CREATE QUEUE` wrote them.
    pub(crate) fn backend_create_table(&self, if_not_exists: bool) -> String {
        if self.dialect == Dialect::PostgreSql {
            return self.pg_backend_create_table(if_not_exists);
        }
        let mut out = String::from("CREATE TABLE ");
        if if_not_exists {
            out.push_str("IF NOT EXISTS ");
        }
        out.push_str(&self.written_name);
        out.push_str(" (\n");
        for column in self.declared_columns() {
            out.push_str(&format!("  {},\n", column.definition()));
        }
        out.push_str(&format!(
            "  {DELIVER_TIME_COLUMN} TIMESTAMP NOT NULL DEFAULT (CURRENT_TIMESTAMP()),\n"
        ));
        out.push_str(&format!(
            "  {MESSAGE_ID_COLUMN} STRING(36) NOT NULL DEFAULT (GENERATE_UUID()) HIDDEN,\n"
        ));
        out.push_str(&format!(
            "  {META_COLUMN} STRING(MAX) DEFAULT ({}) HIDDEN,\n",
            self.meta_literal()
        ));
        out.push_str(&format!(
            ") PRIMARY KEY ({})",
            self.key_list(|k| k.written.clone())
        ));
        if let Some(interleave) = self.interleave.as_ref().filter(|i| i.in_parent) {
            out.push_str(",\n  ");
            out.push_str(&interleave.sql_naming(&interleave.parent_written));
        }
        if let Some(policy) = &self.row_deletion_policy {
            out.push_str(&format!(",\n  ROW DELETION POLICY ({policy})"));
        }
        out
    }

    /// The metadata as the string literal used in the DEFAULT of [`META_COLUMN`].
    pub(super) fn meta_literal(&self) -> String {
        match self.dialect {
            Dialect::GoogleSql => quote_string(Dialect::GoogleSql, &encode_meta(&self.meta())),
            Dialect::PostgreSql => quote_string(Dialect::PostgreSql, &encode_meta(&self.meta())),
        }
    }

    /// The backend statement that stores this queue's current metadata, naming the table as
    /// `table` (as the client's `ALTER QUEUE` writes it).
    pub(super) fn backend_set_meta(&self, table: &str) -> String {
        if self.dialect == Dialect::PostgreSql {
            return format!(
                "ALTER TABLE {table} ALTER COLUMN {} SET DEFAULT {}",
                quote_ident(Dialect::PostgreSql, META_COLUMN),
                self.meta_literal()
            );
        }
        format!(
            "ALTER TABLE {table} ALTER COLUMN {META_COLUMN} SET DEFAULT ({})",
            self.meta_literal()
        )
    }

    /// The queue as a client-facing `CREATE QUEUE` statement, in the layout of the emulator's
    /// `GetDatabaseDdl`.
    pub(crate) fn client_create_queue(&self) -> String {
        if self.dialect == Dialect::PostgreSql {
            return self.pg_client_create_queue();
        }
        let mut out = format!(
            "CREATE QUEUE {} (\n",
            quote_ident(Dialect::GoogleSql, &self.name)
        );
        for column in self.declared_columns() {
            out.push_str(&format!("  {},\n", column.render(true)));
        }
        out.push_str(&format!(
            ") PRIMARY KEY({})",
            self.key_list(|k| quote_ident(Dialect::GoogleSql, &k.column.name).into_owned())
        ));
        if let Some(interleave) = &self.interleave {
            let mut interleave = interleave.clone();
            if interleave.in_parent && interleave.on_delete.is_none() {
                interleave.on_delete = Some(OnDelete::NoAction);
            }
            out.push_str(",\n  ");
            out.push_str(&interleave.sql());
        }
        if let Some(policy) = &self.row_deletion_policy {
            out.push_str(&format!(",\n  ROW DELETION POLICY ({policy})"));
        }
        let options = self.options.items();
        if !options.is_empty() {
            out.push_str(&format!(",\n  OPTIONS ({})", options.join(", ")));
        }
        out
    }
}

/// What the front remembers about a table that is not a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TableInfo {
    /// The table name, as declared.
    pub(super) name: String,
    /// Its primary key: column names and types, in key order.
    pub(super) key: Vec<(String, String)>,
    /// Its `JSON` columns (the official emulator does not hold them to the cell size limit).
    pub(super) json_columns: Vec<String>,
    /// Its columns, when a DML `INSERT` into it may become a mutation (see
    /// [`Catalog::insertable`](super::Catalog::insertable)).
    pub(super) insertable: Option<Vec<InsertColumn>>,
}

/// A column of a table rows may be inserted into by mutation (see [`Catalog::insertable`](super::Catalog::insertable)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InsertColumn {
    /// The column name, as declared.
    pub(crate) name: String,
    /// Its type, as declared.
    pub(crate) data_type: String,
    /// `NOT NULL` without a default: an insert must name it.
    pub(crate) required: bool,
}

/// A table (not a queue) a keyed DML `INSERT` into which the front may run as a mutation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Insertable<'a> {
    /// The table name, as declared.
    pub(crate) name: &'a str,
    /// Its primary key: column names and types, in key order.
    pub(crate) key: &'a [(String, String)],
    /// Its columns.
    pub(crate) columns: &'a [InsertColumn],
}

/// The map key of a schema object name.
pub(super) fn fold(name: &str) -> String {
    name.to_ascii_lowercase()
}

impl ColumnDef {
    /// The definition as one line of PostgreSQL DDL, in the order the official emulator prints
    /// (`name type [DEFAULT e] [NOT NULL] [GENERATED ALWAYS AS (e) STORED]`), with the name
    /// written as `name`.
    fn pg_definition(&self, name: &str) -> String {
        let mut out = format!("{name} {}", self.data_type);
        if let Some(default) = &self.default {
            out.push_str(&format!(" DEFAULT {default}"));
        }
        if self.not_null {
            out.push_str(" NOT NULL");
        }
        if let Some(expr) = &self.generated {
            out.push_str(&format!(" GENERATED ALWAYS AS ({expr})"));
            if self.stored {
                out.push_str(" STORED");
            }
        }
        out
    }
}

impl QueueDef {
    /// The clauses after the closing parenthesis (interleave, TTL), each prefixed by a space;
    /// the backend's (`for_client` false) name the parent as written, the client's view also
    /// prints the default `ON DELETE`.
    fn pg_trailer(&self, for_client: bool) -> String {
        let mut out = String::new();
        if let Some(interleave) = &self.interleave {
            out.push_str(" INTERLEAVE IN ");
            if interleave.in_parent {
                out.push_str("PARENT ");
            }
            if for_client {
                out.push_str(&quote_ident(Dialect::PostgreSql, &interleave.parent));
            } else {
                out.push_str(&interleave.parent_written);
            }
            let action = interleave
                .on_delete
                .or((for_client && interleave.in_parent).then_some(OnDelete::NoAction));
            if let Some(action) = action {
                out.push_str(" ON DELETE ");
                out.push_str(action.sql());
            }
        }
        if let Some(policy) = &self.row_deletion_policy {
            out.push_str(" TTL ");
            out.push_str(policy);
        }
        out
    }

    /// The backend `CREATE TABLE` of a PostgreSQL-dialect queue.
    pub(super) fn pg_backend_create_table(&self, if_not_exists: bool) -> String {
        let mut out = String::from("CREATE TABLE ");
        if if_not_exists {
            out.push_str("IF NOT EXISTS ");
        }
        out.push_str(&self.written_name);
        out.push_str(" (\n");
        for column in self.declared_columns() {
            out.push_str(&format!("  {},\n", column.pg_definition(&column.written)));
        }
        out.push_str(&format!(
            "  {PG_DELIVER_TIME_COLUMN} timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,\n"
        ));
        out.push_str(&format!(
            "  {} timestamptz GENERATED ALWAYS AS ({PG_DELIVER_TIME_COLUMN}) STORED,\n",
            quote_ident(Dialect::PostgreSql, DELIVER_TIME_COLUMN)
        ));
        out.push_str(&format!(
            "  {} varchar(36) NOT NULL DEFAULT spanner.generate_uuid(),\n",
            quote_ident(Dialect::PostgreSql, MESSAGE_ID_COLUMN)
        ));
        out.push_str(&format!(
            "  {} varchar DEFAULT {},\n",
            quote_ident(Dialect::PostgreSql, META_COLUMN),
            self.meta_literal()
        ));
        out.push_str(&format!(
            "  PRIMARY KEY ({})\n)",
            self.key_list(|k| k.written.clone())
        ));
        out.push_str(&self.pg_trailer(false));
        out
    }

    /// The queue as a client-facing PostgreSQL `CREATE QUEUE`, in the layout of the official
    /// emulator's `GetDatabaseDdl` for tables.
    pub(super) fn pg_client_create_queue(&self) -> String {
        let quote = |name: &str| quote_ident(Dialect::PostgreSql, name).into_owned();
        let mut out = format!("CREATE QUEUE {} (\n", quote(&self.name));
        for column in self.declared_columns() {
            out.push_str(&format!(
                "  {},\n",
                column.pg_definition(&quote(&column.name))
            ));
        }
        out.push_str(&format!(
            "  PRIMARY KEY({})\n)",
            self.key_list(|k| quote(&k.column.name))
        ));
        out.push_str(&self.pg_trailer(true));
        out
    }
}
