mod architecture;
mod failpoints;
mod publication;
mod schedule;
mod storage;
