"""Measuring a board: microbenchmarks that measure its time and energy rooflines through the board's own meter
(floor 6: above devices; the roofline package stays pure math)."""
