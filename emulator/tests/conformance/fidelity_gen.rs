//! The statements of the pass-through property test (see `fidelity`), generated with proptest
//! for one table of every common column type, in either dialect.
//!
//! Both sides receive the very same request, so a statement need not be valid: whatever one
//! side answers, the other must answer the same. Most generated statements are valid, so that
//! the table holds rows worth reading.

use std::collections::HashMap;

use base64::Engine as _;
use googleapis_tonic_google_spanner_v1::google::spanner::v1 as pb;
use proptest::prelude::*;
use prost_types::value::Kind;

/// The SQL dialect of a database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    GoogleSql,
    PostgreSql,
}

/// The test table in `dialect`: a key and one column of every common type, all nullable.
pub(crate) fn table_ddl(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::GoogleSql => {
            "CREATE TABLE T (K INT64 NOT NULL, S STRING(MAX), I INT64, F FLOAT64, B BOOL, \
             Y BYTES(MAX), TS TIMESTAMP, D DATE, N NUMERIC, A ARRAY<INT64>) PRIMARY KEY (K)"
        }
        Dialect::PostgreSql => {
            "CREATE TABLE t (k bigint NOT NULL, s varchar, i bigint, f float8, b bool, \
             y bytea, ts timestamptz, d date, n numeric, a bigint[], PRIMARY KEY (k))"
        }
    }
}

/// A column of the test table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Col {
    K,
    S,
    I,
    F,
    B,
    Y,
    Ts,
    D,
    N,
    A,
}

/// Every column but the key.
const VALUE_COLS: [Col; 9] = [
    Col::S,
    Col::I,
    Col::F,
    Col::B,
    Col::Y,
    Col::Ts,
    Col::D,
    Col::N,
    Col::A,
];

impl Col {
    pub(crate) fn name(self, dialect: Dialect) -> &'static str {
        let name = match self {
            Col::K => "K",
            Col::S => "S",
            Col::I => "I",
            Col::F => "F",
            Col::B => "B",
            Col::Y => "Y",
            Col::Ts => "TS",
            Col::D => "D",
            Col::N => "N",
            Col::A => "A",
        };
        match dialect {
            Dialect::GoogleSql => name,
            Dialect::PostgreSql => match self {
                Col::K => "k",
                Col::S => "s",
                Col::I => "i",
                Col::F => "f",
                Col::B => "b",
                Col::Y => "y",
                Col::Ts => "ts",
                Col::D => "d",
                Col::N => "n",
                Col::A => "a",
            },
        }
    }

    fn type_code(self) -> pb::TypeCode {
        match self {
            Col::K | Col::I => pb::TypeCode::Int64,
            Col::S => pb::TypeCode::String,
            Col::F => pb::TypeCode::Float64,
            Col::B => pb::TypeCode::Bool,
            Col::Y => pb::TypeCode::Bytes,
            Col::Ts => pb::TypeCode::Timestamp,
            Col::D => pb::TypeCode::Date,
            Col::N => pb::TypeCode::Numeric,
            Col::A => pb::TypeCode::Array,
        }
    }

    /// The wire type of a parameter for this column.
    fn param_type(self, dialect: Dialect) -> pb::Type {
        let mut t = pb::Type {
            code: self.type_code() as i32,
            ..pb::Type::default()
        };
        if self == Col::N && dialect == Dialect::PostgreSql {
            t.type_annotation = pb::TypeAnnotationCode::PgNumeric as i32;
        }
        if self == Col::A {
            t.array_element_type = Some(Box::new(pb::Type {
                code: pb::TypeCode::Int64 as i32,
                ..pb::Type::default()
            }));
        }
        t
    }
}

/// A value of some column (NULL included).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Val {
    Null,
    Int(i64),
    Str(String),
    Float(f64),
    Bool(bool),
    Bytes(Vec<u8>),
    Ts(&'static str),
    Date(&'static str),
    Num(&'static str),
    Arr(Vec<Option<i64>>),
}

/// Timestamps in the wire form both sides print.
const TIMESTAMPS: [&str; 3] = [
    "2024-01-01T00:00:00Z",
    "2024-02-29T12:34:56.789Z",
    "1970-01-01T00:00:00.000001Z",
];
const DATES: [&str; 3] = ["2024-02-29", "1999-12-31", "0001-01-01"];
const NUMERICS: [&str; 4] = ["0", "1.5", "-12345.678901234", "99999999999999999999.5"];

/// A non-NULL value for `col`.
fn value_of(col: Col) -> BoxedStrategy<Val> {
    match col {
        Col::K => (0i64..6).prop_map(Val::Int).boxed(),
        Col::I => prop_oneof![
            4 => (-5i64..6).prop_map(Val::Int),
            1 => Just(Val::Int(i64::MAX)),
        ]
        .boxed(),
        Col::S => prop_oneof![
            Just(String::new()),
            "[a-c]{1,3}",
            Just("it's".to_owned()),
            Just("é ☃".to_owned()),
            Just("back\\slash".to_owned()),
        ]
        .prop_map(Val::Str)
        .boxed(),
        Col::F => prop_oneof![
            Just(0.5),
            Just(-1.25),
            Just(1e10),
            Just(0.0),
            (-100i32..100).prop_map(f64::from),
        ]
        .prop_map(Val::Float)
        .boxed(),
        Col::B => any::<bool>().prop_map(Val::Bool).boxed(),
        Col::Y => prop::collection::vec(any::<u8>(), 0..4)
            .prop_map(Val::Bytes)
            .boxed(),
        Col::Ts => prop::sample::select(&TIMESTAMPS[..])
            .prop_map(Val::Ts)
            .boxed(),
        Col::D => prop::sample::select(&DATES[..]).prop_map(Val::Date).boxed(),
        Col::N => prop::sample::select(&NUMERICS[..])
            .prop_map(Val::Num)
            .boxed(),
        Col::A => prop::collection::vec(prop::option::weighted(0.8, -3i64..4), 0..3)
            .prop_map(Val::Arr)
            .boxed(),
    }
}

/// A value for `col`, NULL one time in five.
fn nullable_value_of(col: Col) -> BoxedStrategy<Val> {
    prop_oneof![1 => Just(Val::Null), 4 => value_of(col)].boxed()
}

/// How a value is written in a statement.
#[derive(Debug, Clone)]
pub(crate) enum Arg {
    /// A literal.
    Literal(Val),
    /// A typed query parameter.
    Param(Col, Val),
}

fn arg(col: Col) -> BoxedStrategy<Arg> {
    (nullable_value_of(col), any::<bool>())
        .prop_map(move |(v, param)| {
            if param {
                Arg::Param(col, v)
            } else {
                Arg::Literal(v)
            }
        })
        .boxed()
}

/// A non-NULL argument for `col` (keys, comparisons).
fn some_arg(col: Col) -> BoxedStrategy<Arg> {
    (value_of(col), any::<bool>())
        .prop_map(move |(v, param)| {
            if param {
                Arg::Param(col, v)
            } else {
                Arg::Literal(v)
            }
        })
        .boxed()
}

/// A condition on rows.
#[derive(Debug, Clone)]
pub(crate) enum Pred {
    KeyIs(Arg),
    KeyAbove(Arg),
    KeyIn(Vec<i64>),
    IsNull(Col),
    Equals(Col, Arg),
    Like(String),
    BoolCol,
    And(Box<Pred>, Box<Pred>),
    Or(Box<Pred>, Box<Pred>),
    Always,
}

fn value_col() -> impl Strategy<Value = Col> {
    prop::sample::select(&VALUE_COLS[..])
}

fn pred() -> impl Strategy<Value = Pred> {
    let leaf = prop_oneof![
        3 => some_arg(Col::K).prop_map(Pred::KeyIs),
        1 => some_arg(Col::K).prop_map(Pred::KeyAbove),
        1 => prop::collection::vec(0i64..6, 1..3).prop_map(Pred::KeyIn),
        1 => value_col().prop_map(Pred::IsNull),
        1 => prop::sample::select(&[Col::I, Col::S, Col::B][..])
            .prop_flat_map(|c| some_arg(c).prop_map(move |a| Pred::Equals(c, a))),
        1 => "[a-c]%".prop_map(Pred::Like),
        1 => Just(Pred::BoolCol),
        1 => Just(Pred::Always),
    ];
    leaf.prop_recursive(2, 6, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Pred::And(Box::new(a), Box::new(b))),
            (inner.clone(), inner).prop_map(|(a, b)| Pred::Or(Box::new(a), Box::new(b))),
        ]
    })
}

/// A statement shape.
#[derive(Debug, Clone)]
pub(crate) enum Shape {
    /// `INSERT INTO T (K, cols…) VALUES (…)[, (…)] [THEN RETURN | RETURNING …]`.
    Insert {
        cols: Vec<Col>,
        rows: Vec<(Arg, Vec<Arg>)>,
        returning: bool,
    },
    /// `UPDATE T SET col = …[, I = I + n] WHERE … [THEN RETURN | RETURNING …]`.
    Update {
        set: Vec<(Col, Arg)>,
        bump: Option<i64>,
        pred: Pred,
        returning: bool,
    },
    /// `DELETE FROM T WHERE … [THEN RETURN | RETURNING …]`.
    Delete { pred: Pred, returning: bool },
    /// `SELECT cols FROM T [WHERE …] ORDER BY K [LIMIT n]`.
    Select {
        cols: Vec<Col>,
        pred: Pred,
        limit: Option<i64>,
    },
    /// `SELECT COUNT(*), SUM(I), MIN(S), MAX(F), … FROM T [WHERE …] [GROUP BY B]`.
    Aggregate { pred: Pred, group: bool },
    /// A statement that fails (or may): division by zero, an unknown column or table, a NULL
    /// key, a syntax error, a type mismatch.
    Failing(Failing),
}

/// The failing statements.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Failing {
    DivideByZero,
    UnknownColumn,
    UnknownTable,
    NullKey,
    Syntax,
    TypeMismatch,
    Overflow,
}

fn returning() -> impl Strategy<Value = bool> {
    prop::bool::weighted(0.3)
}

/// One write in a `Commit`.
#[derive(Debug, Clone)]
pub(crate) enum Write {
    Insert(Vec<Col>, Val, Vec<Val>),
    Update(Vec<Col>, Val, Vec<Val>),
    InsertOrUpdate(Vec<Col>, Val, Vec<Val>),
    Replace(Vec<Col>, Val, Vec<Val>),
    Delete(Vec<i64>),
}

fn write() -> impl Strategy<Value = Write> {
    let row = prop::sample::subsequence(&VALUE_COLS[..], 0..=4).prop_flat_map(|cols| {
        let values = cols
            .iter()
            .map(|c| nullable_value_of(*c))
            .collect::<Vec<_>>();
        (Just(cols), value_of(Col::K), values, 0u8..4)
    });
    prop_oneof![
        4 => row.prop_map(|(cols, key, values, kind)| match kind {
            0 => Write::Insert(cols, key, values),
            1 => Write::Update(cols, key, values),
            2 => Write::InsertOrUpdate(cols, key, values),
            _ => Write::Replace(cols, key, values),
        }),
        1 => prop::collection::vec(0i64..6, 1..3).prop_map(Write::Delete),
    ]
}

/// One step of a case, as generated (rendered per dialect by [`render`] and [`mutations`]).
#[derive(Debug, Clone)]
pub(crate) enum Step {
    /// A query: `ExecuteStreamingSql` when `streaming`, else `ExecuteSql`.
    Query { shape: Shape, streaming: bool },
    /// DML in a read-write transaction, begun inline (in the statement) or by
    /// `BeginTransaction`, then committed.
    Dml { shape: Shape, inline_begin: bool },
    /// `ExecuteBatchDml` of several DML statements, then a commit.
    Batch(Vec<Shape>),
    /// A single-use read-write `Commit` of mutations.
    Mutations(Vec<Write>),
}

/// A DML statement: `INSERT`, `UPDATE`, `DELETE`, or one that fails (a NULL key, an overflow).
fn dml_shape() -> impl Strategy<Value = Shape> {
    let cols = prop::sample::subsequence(&VALUE_COLS[..], 0..=VALUE_COLS.len());
    let insert = cols
        .prop_flat_map(|cols| {
            let row = (
                some_arg(Col::K),
                cols.iter().map(|c| arg(*c)).collect::<Vec<_>>(),
            );
            (Just(cols), prop::collection::vec(row, 1..3), returning())
        })
        .prop_map(|(cols, rows, returning)| Shape::Insert {
            cols,
            rows,
            returning,
        });
    let update = (
        prop::sample::subsequence(&VALUE_COLS[..], 1..3).prop_flat_map(|cols| {
            cols.into_iter()
                .map(|c| arg(c).prop_map(move |a| (c, a)))
                .collect::<Vec<_>>()
        }),
        prop::option::weighted(0.3, -2i64..3),
        pred(),
        returning(),
    )
        .prop_map(|(set, bump, pred, returning)| {
            // `I = I + n` only where `I` is not set otherwise.
            let bump = bump.filter(|_| set.iter().all(|(c, _)| *c != Col::I));
            Shape::Update {
                set,
                bump,
                pred,
                returning,
            }
        });
    let delete =
        (pred(), returning()).prop_map(|(pred, returning)| Shape::Delete { pred, returning });
    let failing =
        prop::sample::select(&[Failing::NullKey, Failing::Overflow][..]).prop_map(Shape::Failing);
    prop_oneof![
        5 => insert,
        3 => update,
        2 => delete,
        1 => failing,
    ]
}

/// A query: `SELECT` of some columns, an aggregate, or one that fails.
fn query_shape() -> impl Strategy<Value = Shape> {
    let select = (
        prop::sample::subsequence(&VALUE_COLS[..], 1..=VALUE_COLS.len()),
        pred(),
        prop::option::weighted(0.3, 0i64..4),
    )
        .prop_map(|(cols, pred, limit)| Shape::Select { cols, pred, limit });
    let aggregate =
        (pred(), any::<bool>()).prop_map(|(pred, group)| Shape::Aggregate { pred, group });
    let failing = prop::sample::select(
        &[
            Failing::DivideByZero,
            Failing::UnknownColumn,
            Failing::UnknownTable,
            Failing::Syntax,
            Failing::TypeMismatch,
        ][..],
    )
    .prop_map(Shape::Failing);
    prop_oneof![
        4 => select,
        2 => aggregate,
        1 => failing,
    ]
}

/// One step.
pub(crate) fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (query_shape(), any::<bool>())
            .prop_map(|(shape, streaming)| Step::Query { shape, streaming }),
        5 => (dml_shape(), any::<bool>())
            .prop_map(|(shape, inline_begin)| Step::Dml { shape, inline_begin }),
        1 => prop::collection::vec(dml_shape(), 1..4).prop_map(Step::Batch),
        2 => prop::collection::vec(write(), 1..4).prop_map(Step::Mutations),
    ]
}

/// A statement as sent: its text and its parameters.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sql {
    pub(crate) text: String,
    pub(crate) params: prost_types::Struct,
    pub(crate) param_types: HashMap<String, pb::Type>,
}

/// Renders shapes as SQL of one dialect, numbering parameters.
struct Render {
    dialect: Dialect,
    sql: Sql,
}

impl Render {
    fn col(&self, col: Col) -> &'static str {
        col.name(self.dialect)
    }

    fn table(&self) -> &'static str {
        match self.dialect {
            Dialect::GoogleSql => "T",
            Dialect::PostgreSql => "t",
        }
    }

    fn arg(&mut self, arg: &Arg) -> String {
        match arg {
            Arg::Literal(val) => literal(self.dialect, val),
            Arg::Param(col, val) => {
                let n = self.sql.params.fields.len() + 1;
                let name = format!("p{n}");
                self.sql.params.fields.insert(name.clone(), wire_value(val));
                self.sql
                    .param_types
                    .insert(name, col.param_type(self.dialect));
                match self.dialect {
                    Dialect::GoogleSql => format!("@p{n}"),
                    Dialect::PostgreSql => format!("${n}"),
                }
            }
        }
    }

    fn pred(&mut self, pred: &Pred) -> String {
        let k = self.col(Col::K);
        match pred {
            Pred::KeyIs(a) => format!("{k} = {}", self.arg(a)),
            Pred::KeyAbove(a) => format!("{k} > {}", self.arg(a)),
            Pred::KeyIn(keys) => {
                let keys: Vec<String> = keys.iter().map(i64::to_string).collect();
                format!("{k} IN ({})", keys.join(", "))
            }
            Pred::IsNull(c) => format!("{} IS NULL", self.col(*c)),
            Pred::Equals(c, a) => format!("{} = {}", self.col(*c), self.arg(a)),
            Pred::Like(p) => format!("{} LIKE '{p}'", self.col(Col::S)),
            Pred::BoolCol => self.col(Col::B).to_owned(),
            Pred::And(a, b) => format!("({} AND {})", self.pred(a), self.pred(b)),
            Pred::Or(a, b) => format!("({} OR {})", self.pred(a), self.pred(b)),
            Pred::Always => "TRUE".to_owned(),
        }
    }

    fn returning(&self, returning: bool) -> String {
        if !returning {
            return String::new();
        }
        let cols = format!("{}, {}", self.col(Col::K), self.col(Col::S));
        match self.dialect {
            Dialect::GoogleSql => format!(" THEN RETURN {cols}"),
            Dialect::PostgreSql => format!(" RETURNING {cols}"),
        }
    }

    fn shape(&mut self, shape: &Shape) -> String {
        let t = self.table();
        let k = self.col(Col::K);
        match shape {
            Shape::Insert {
                cols,
                rows,
                returning,
            } => {
                let mut names = vec![k];
                names.extend(cols.iter().map(|c| self.col(*c)));
                let rows: Vec<String> = rows
                    .iter()
                    .map(|(key, values)| {
                        let mut vals = vec![self.arg(key)];
                        vals.extend(values.iter().map(|v| self.arg(v)));
                        format!("({})", vals.join(", "))
                    })
                    .collect();
                format!(
                    "INSERT INTO {t} ({}) VALUES {}{}",
                    names.join(", "),
                    rows.join(", "),
                    self.returning(*returning)
                )
            }
            Shape::Update {
                set,
                bump,
                pred,
                returning,
            } => {
                let mut sets: Vec<String> = set
                    .iter()
                    .map(|(c, a)| format!("{} = {}", self.col(*c), self.arg(a)))
                    .collect();
                if let Some(n) = bump {
                    let i = self.col(Col::I);
                    sets.push(format!("{i} = {i} + {n}"));
                }
                format!(
                    "UPDATE {t} SET {} WHERE {}{}",
                    sets.join(", "),
                    self.pred(pred),
                    self.returning(*returning)
                )
            }
            Shape::Delete { pred, returning } => format!(
                "DELETE FROM {t} WHERE {}{}",
                self.pred(pred),
                self.returning(*returning)
            ),
            Shape::Select { cols, pred, limit } => {
                let mut names = vec![k];
                names.extend(cols.iter().map(|c| self.col(*c)));
                let limit = limit.map_or(String::new(), |n| format!(" LIMIT {n}"));
                format!(
                    "SELECT {} FROM {t} WHERE {} ORDER BY {k}{limit}",
                    names.join(", "),
                    self.pred(pred)
                )
            }
            Shape::Aggregate { pred, group } => {
                let (i, s, f, b) = (
                    self.col(Col::I),
                    self.col(Col::S),
                    self.col(Col::F),
                    self.col(Col::B),
                );
                let group = if *group {
                    format!(" GROUP BY {b}")
                } else {
                    String::new()
                };
                format!(
                    "SELECT COUNT(*), COUNT({s}), MIN({s}), MAX({f}), AVG({f}), SUM({i}) FROM {t} \
                     WHERE {}{group}",
                    self.pred(pred)
                )
            }
            Shape::Failing(failing) => self.failing(*failing),
        }
    }

    fn failing(&self, failing: Failing) -> String {
        let (t, k, i, s) = (
            self.table(),
            self.col(Col::K),
            self.col(Col::I),
            self.col(Col::S),
        );
        match failing {
            Failing::DivideByZero => match self.dialect {
                Dialect::GoogleSql => format!("SELECT DIV({k}, 0) FROM {t}"),
                Dialect::PostgreSql => format!("SELECT {k} / 0 FROM {t}"),
            },
            Failing::UnknownColumn => format!("SELECT nope FROM {t}"),
            Failing::UnknownTable => "SELECT 1 FROM nope".to_owned(),
            Failing::NullKey => format!("INSERT INTO {t} ({k}) VALUES (NULL)"),
            Failing::Syntax => format!("SELEC {k} FROM {t}"),
            Failing::TypeMismatch => format!("SELECT {k} FROM {t} WHERE {s} = TRUE"),
            Failing::Overflow => {
                format!("UPDATE {t} SET {i} = {i} + 9223372036854775807 WHERE TRUE")
            }
        }
    }
}

/// The SQL literal of `val` in `dialect`.
fn literal(dialect: Dialect, val: &Val) -> String {
    let google = dialect == Dialect::GoogleSql;
    match val {
        Val::Null => "NULL".to_owned(),
        Val::Int(n) => n.to_string(),
        Val::Str(s) if google => format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'")),
        Val::Str(s) => format!("'{}'", s.replace('\'', "''")),
        Val::Float(f) => format!("{f:?}"),
        Val::Bool(b) => if *b { "TRUE" } else { "FALSE" }.to_owned(),
        Val::Bytes(b) if google => {
            let escaped: String = b.iter().map(|x| format!("\\x{x:02x}")).collect();
            format!("b'{escaped}'")
        }
        Val::Bytes(b) => {
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            format!("'\\x{hex}'::bytea")
        }
        Val::Ts(t) if google => format!("TIMESTAMP '{t}'"),
        Val::Ts(t) => format!("'{t}'::timestamptz"),
        Val::Date(d) if google => format!("DATE '{d}'"),
        Val::Date(d) => format!("'{d}'::date"),
        Val::Num(n) if google => format!("NUMERIC '{n}'"),
        Val::Num(n) => format!("'{n}'::numeric"),
        Val::Arr(items) => {
            let items: Vec<String> = items
                .iter()
                .map(|i| i.map_or("NULL".to_owned(), |i| i.to_string()))
                .collect();
            match dialect {
                Dialect::GoogleSql => format!("ARRAY<INT64>[{}]", items.join(", ")),
                Dialect::PostgreSql => format!("ARRAY[{}]::bigint[]", items.join(", ")),
            }
        }
    }
}

/// `val` in Spanner's wire encoding.
pub(crate) fn wire_value(val: &Val) -> prost_types::Value {
    let kind = match val {
        Val::Null => Kind::NullValue(0),
        Val::Int(n) => Kind::StringValue(n.to_string()),
        Val::Str(s) => Kind::StringValue(s.clone()),
        Val::Float(f) => Kind::NumberValue(*f),
        Val::Bool(b) => Kind::BoolValue(*b),
        Val::Bytes(b) => Kind::StringValue(base64::engine::general_purpose::STANDARD.encode(b)),
        Val::Ts(t) | Val::Date(t) | Val::Num(t) => Kind::StringValue((*t).to_owned()),
        Val::Arr(items) => Kind::ListValue(prost_types::ListValue {
            values: items
                .iter()
                .map(|i| prost_types::Value {
                    kind: Some(match i {
                        Some(i) => Kind::StringValue(i.to_string()),
                        None => Kind::NullValue(0),
                    }),
                })
                .collect(),
        }),
    };
    prost_types::Value { kind: Some(kind) }
}

/// A shape rendered as one statement of `dialect`.
pub(crate) fn render(dialect: Dialect, shape: &Shape) -> Sql {
    let mut render = Render {
        dialect,
        sql: Sql::default(),
    };
    render.sql.text = render.shape(shape);
    render.sql
}

/// Writes as mutations of `dialect`'s table.
pub(crate) fn mutations(dialect: Dialect, writes: &[Write]) -> Vec<pb::Mutation> {
    use pb::mutation::{Delete, Operation, Write as W};
    let table = match dialect {
        Dialect::GoogleSql => "T",
        Dialect::PostgreSql => "t",
    };
    let write = |cols: &[Col], key: &Val, values: &[Val]| {
        let mut columns = vec![Col::K.name(dialect).to_owned()];
        columns.extend(cols.iter().map(|c| c.name(dialect).to_owned()));
        let mut row = vec![wire_value(key)];
        row.extend(values.iter().map(wire_value));
        W {
            table: table.to_owned(),
            columns,
            values: vec![prost_types::ListValue { values: row }],
        }
    };
    writes
        .iter()
        .map(|w| pb::Mutation {
            operation: Some(match w {
                Write::Insert(c, k, v) => Operation::Insert(write(c, k, v)),
                Write::Update(c, k, v) => Operation::Update(write(c, k, v)),
                Write::InsertOrUpdate(c, k, v) => Operation::InsertOrUpdate(write(c, k, v)),
                Write::Replace(c, k, v) => Operation::Replace(write(c, k, v)),
                Write::Delete(keys) => Operation::Delete(Delete {
                    table: table.to_owned(),
                    key_set: Some(pb::KeySet {
                        keys: keys
                            .iter()
                            .map(|k| prost_types::ListValue {
                                values: vec![wire_value(&Val::Int(*k))],
                            })
                            .collect(),
                        ..pb::KeySet::default()
                    }),
                }),
            }),
        })
        .collect()
}
