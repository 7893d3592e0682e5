"""Where device and host figures come from: one module per source, each returning plain samples."""
