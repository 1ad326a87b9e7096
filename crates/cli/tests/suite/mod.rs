mod ask;
mod serve;
mod support;
