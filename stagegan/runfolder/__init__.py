"""The TF-free surface: the run folder and its files (numbering and the lock, the checkpoint index,
metrics and TensorBoard logs, sample pictures)."""
