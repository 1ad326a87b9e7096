mod api;
mod approvals;
mod auth;
mod callback;
mod control;
mod diff;
mod diff_sensitive_paths;
mod events;
