mod api;
mod approvals;
mod auth;
mod control;
mod diff;
mod events;
