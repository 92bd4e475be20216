//! Integration tests: one test binary, one emulator per run, one database per test.

mod admin;
mod batches;
mod dialects;
mod ordering;
mod outcome;
mod receive;
mod reliability;
mod send;
mod settings;
mod smoke;
mod worker;
mod worker_tables;
