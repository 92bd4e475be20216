//! Derive macros for `spanner-queues`. Not intended to be used directly: depend on
//! `spanner-queues`, which re-exports [`QueueMessage`](macro@QueueMessage).

mod attr;
mod expand;
mod rules;

use proc_macro::TokenStream;
use syn::{DeriveInput, parse_macro_input};

/// Derives `spanner_queues::QueueMessage`; the attributes are documented on that trait.
#[proc_macro_derive(QueueMessage, attributes(queue, serde))]
pub fn derive_queue_message(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive_queue_message(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Not public API. `__identifier_problem!(queue "Name")` expands to `"ok"` or the code of the
/// rule `"Name"` breaks, so that a test can compare these compile-time rules with the runtime
/// ones in `spanner_queues::ident`.
#[doc(hidden)]
#[proc_macro]
pub fn __identifier_problem(input: TokenStream) -> TokenStream {
    expand::identifier_problem(input.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
