mod approvals;
mod api;
