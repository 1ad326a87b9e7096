mod ask;
mod change;
mod serve;
mod support;
