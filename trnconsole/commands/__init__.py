"""The CLI's larger subcommands, one module each; cli.py parses arguments and calls them."""
