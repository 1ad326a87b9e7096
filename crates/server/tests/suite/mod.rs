mod approvals;
mod api;
mod control;
