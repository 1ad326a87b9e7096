mod architecture;
