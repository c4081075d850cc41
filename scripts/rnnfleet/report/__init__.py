"""The report: the fleet's table and its rows, the forecasts table, charts, loss curves, SVG, the pages."""
