mod ask;
mod support;
