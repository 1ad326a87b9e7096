mod ask;
mod change;
mod publish;
mod serve;
mod support;
