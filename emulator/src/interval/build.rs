//! Expression nodes the rewrite writes, and syntactic questions about the ones it reads.

use sqlparser::ast::{
    BinaryOperator, CaseWhen, CastKind, DataType, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArgumentList, FunctionArguments, Ident, ObjectName, ObjectNamePart, TimezoneInfo,
    UnaryOperator, Value, helpers::attached_token::AttachedToken,
};

/// The official emulator's function that adds an interval, given as text, to a timestamptz.
pub(super) const ADD: &str = "timestamptz_add";
/// The official emulator's function that subtracts an interval, given as text.
pub(super) const SUBTRACT: &str = "timestamptz_subtract";
/// The schema of both.
const SPANNER: &str = "spanner";

/// `spanner.<function>(args…)`.
pub(super) fn emulator_call(function: &str, args: Vec<Expr>) -> Expr {
    Expr::Function(Function {
        name: ObjectName(vec![
            ObjectNamePart::Identifier(Ident::new(SPANNER)),
            ObjectNamePart::Identifier(Ident::new(function)),
        ]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|a| FunctionArg::Unnamed(FunctionArgExpr::Expr(a)))
                .collect(),
            clauses: Vec::new(),
        }),
        within_group: Vec::new(),
        filter: None,
        null_treatment: None,
        over: None,
    })
}

/// `CASE WHEN (a) IS NULL OR … THEN NULL ELSE value END`: PostgreSQL's NULL where the official
/// emulator's process would stop on a NULL argument.
pub(super) fn null_guard(nullable: Vec<Expr>, value: Expr) -> Expr {
    let condition = nullable
        .into_iter()
        .map(|e| Expr::IsNull(Box::new(Expr::Nested(Box::new(e)))))
        .reduce(|a, b| binary(a, BinaryOperator::Or, b))
        .unwrap_or_else(|| Expr::Value(Value::Boolean(false).into()));
    Expr::Case {
        case_token: AttachedToken::empty(),
        end_token: AttachedToken::empty(),
        operand: None,
        conditions: vec![CaseWhen {
            condition,
            result: Expr::Value(Value::Null.into()),
        }],
        else_result: Some(Box::new(value)),
    }
}

pub(super) fn binary(left: Expr, op: BinaryOperator, right: Expr) -> Expr {
    Expr::BinaryOp {
        left: Box::new(left),
        op,
        right: Box::new(right),
    }
}

/// A string literal.
pub(super) fn text(value: &str) -> Expr {
    Expr::Value(Value::SingleQuotedString(value.to_owned()).into())
}

/// `CAST((expr) AS text)`.
pub(super) fn cast_text(expr: Expr) -> Expr {
    Expr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(expr),
        data_type: DataType::Text,
        format: None,
    }
}

/// A number literal.
pub(super) fn number(value: String) -> Expr {
    Expr::Value(Value::Number(value, false).into())
}

/// The value of a string literal of any quoting.
pub(super) fn string_literal(expr: &Expr) -> Option<&str> {
    match expr {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s)
            | Value::EscapedStringLiteral(s)
            | Value::UnicodeStringLiteral(s) => Some(s),
            Value::DollarQuotedString(s) => Some(&s.value),
            _ => None,
        },
        _ => None,
    }
}

/// The text of a placeholder (`$1`).
pub(super) fn placeholder(expr: &Expr) -> Option<&str> {
    match expr {
        Expr::Value(v) => match &v.value {
            Value::Placeholder(p) => Some(p),
            _ => None,
        },
        _ => None,
    }
}

/// The number `expr` writes (`5`, `-1.5`), if that is all it is.
pub(super) fn signed_number(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => Some(n.clone()),
            _ => None,
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => signed_number(expr).map(|n| match n.strip_prefix('-') {
            Some(positive) => positive.to_owned(),
            None => format!("-{n}"),
        }),
        Expr::UnaryOp {
            op: UnaryOperator::Plus,
            expr,
        } => signed_number(expr),
        _ => None,
    }
}

/// The unquoted parts of a function's name, lower-cased.
fn function_name(function: &Function) -> Vec<String> {
    function
        .name
        .0
        .iter()
        .map(|part| match part {
            ObjectNamePart::Identifier(ident) if ident.quote_style.is_none() => {
                ident.value.to_ascii_lowercase()
            }
            _ => String::new(),
        })
        .collect()
}

/// Whether `function` is called `name` (one unquoted part).
pub(super) fn is_function(function: &Function, name: &str) -> bool {
    function_name(function) == [name]
}

/// Whether `function` is the official emulator's `spanner.timestamptz_add` / `_subtract`.
pub(super) fn is_emulator_call(function: &Function) -> bool {
    let name = function_name(function);
    name.len() == 2 && name[0] == SPANNER && (name[1] == ADD || name[1] == SUBTRACT)
}

/// The plain arguments of a call (`None` when one is named or not an expression).
pub(super) fn plain_args(function: &mut Function) -> Option<Vec<&mut Expr>> {
    match &mut function.args {
        FunctionArguments::List(list) => list
            .args
            .iter_mut()
            .map(|arg| match arg {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
                _ => None,
            })
            .collect(),
        FunctionArguments::None => Some(Vec::new()),
        FunctionArguments::Subquery(_) => None,
    }
}

/// `now()`, `transaction_timestamp()`, `current_timestamp[(p)]`: never NULL, a timestamptz.
pub(super) fn is_now(expr: &Expr) -> bool {
    match expr {
        Expr::Function(f) => {
            let no_args = match &f.args {
                FunctionArguments::None => true,
                FunctionArguments::List(list) => list.args.is_empty(),
                FunctionArguments::Subquery(_) => false,
            };
            (no_args && (is_function(f, "now") || is_function(f, "transaction_timestamp")))
                || is_function(f, "current_timestamp")
        }
        _ => false,
    }
}

/// `timestamptz` / `timestamp with time zone`.
pub(super) fn is_timestamptz(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Timestamp(_, TimezoneInfo::Tz | TimezoneInfo::WithTimeZone)
    )
}

/// Whether `expr` is recognizably a timestamptz: `now()`, a cast to timestamptz, a typed
/// timestamptz literal, or the official emulator's interval function.
pub(super) fn is_timestamp(expr: &Expr) -> bool {
    match expr {
        Expr::Cast { data_type, .. } => is_timestamptz(data_type),
        Expr::TypedString(typed) => is_timestamptz(&typed.data_type),
        Expr::Function(f) => is_emulator_call(f) || is_now(expr),
        _ => false,
    }
}

/// Whether `expr` can never be NULL: a literal, a parameter with a value (its request name in
/// `non_null_params`), `now()`, or a cast of one of those.
pub(super) fn never_null(expr: &Expr, non_null_params: &[&str]) -> bool {
    match expr {
        Expr::Value(v) => match &v.value {
            Value::Null => false,
            Value::Placeholder(p) => super::source::param_name(p)
                .is_some_and(|name| non_null_params.contains(&name.as_str())),
            _ => true,
        },
        Expr::Cast { expr, .. } => {
            matches!(**expr, Expr::Value(_)) && never_null(expr, non_null_params)
        }
        Expr::TypedString(_) => true,
        _ => is_now(expr),
    }
}
