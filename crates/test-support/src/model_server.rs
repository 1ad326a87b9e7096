//! A scripted model server for tests.
