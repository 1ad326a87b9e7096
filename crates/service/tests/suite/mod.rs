mod architecture;
mod publication;
mod schedule;
mod storage;
