mod architecture;
mod publication;
