//! Integration tests of the model clients against the scripted model server, over real HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
