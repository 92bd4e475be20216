//! One module per subcommand: its arguments and what it does. Each takes the [`Context`] of the
//! global options and prints through [`output`].
//!
//! [`Context`]: crate::context::Context
//! [`output`]: crate::output

pub(crate) mod dead_letters;
pub(crate) mod pause;
pub(crate) mod peek;
pub(crate) mod queues;
pub(crate) mod schema;
pub(crate) mod send;
pub(crate) mod ui;
