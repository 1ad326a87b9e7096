mod api;
