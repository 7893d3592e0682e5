"""The Textual console: the app, its screens and widgets. No business logic lives here."""
