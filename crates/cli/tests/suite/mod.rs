mod ask;
mod change;
mod control;
mod publish;
mod serve;
mod serve_change;
mod support;
mod token;
