//! The suite: the rendered manifests against their golden file.

mod render;
