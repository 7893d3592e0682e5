"""The console's own widgets."""
