//! The `warden` command.
fn main() {}
