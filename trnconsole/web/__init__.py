"""The console in a browser: the web server behind `trnconsole serve` and the page it sends."""
