//! Integration tests: one test binary, one emulator per run, one database per test.

mod send;
mod smoke;
