mod ask;
mod change;
mod control;
mod publish;
mod serve;
mod support;
mod token;
