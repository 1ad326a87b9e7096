//! Temporary git repositories built with the system git, for tests.
