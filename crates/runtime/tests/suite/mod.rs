mod architecture;
mod decision_loop;
