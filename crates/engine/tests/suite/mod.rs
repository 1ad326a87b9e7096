mod architecture;
mod failpoints;
