"""Image data: the sources (a module each under `sources/`), the real images that samples and
metrics compare with (`real.py`), and `stagegan prepare`."""
