mod architecture;
mod publication;
mod schedule;
