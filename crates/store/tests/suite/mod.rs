//! The conformance suite. Every test in it is an `async fn(Fixture)` run twice by
//! `conformance!`: on a fresh SQLite file and on a fresh Postgres schema (when
//! `WARDEN_TEST_POSTGRES_URL` is set; see `.ci/postgres.sh`).

#[macro_use]
mod harness;

mod approvals;
mod batch;
mod chat;
mod conversation;
mod events;
mod idempotency;
mod journal;
mod ledger;
mod observers;
mod opening;
mod outbox;
mod queue;
mod reporting;
mod repos;
mod state_machine;
mod terminal_events;
mod tokens;
mod upgrade_postgres;
mod web;
