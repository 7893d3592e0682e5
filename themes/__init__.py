"""Bundled colour themes (TOML files), shipped inside the package as trnconsole/themes."""
