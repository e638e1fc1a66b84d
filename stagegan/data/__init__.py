"""Image data: the sources (one registered class each) and `stagegan prepare`."""
