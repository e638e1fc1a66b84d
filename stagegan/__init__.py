"""stagegan: train GANs in stages.

A stage scheduler drives generator-only, discriminator-only and joint phases, each update with
its own optimizer and scope-filtered variables, averaging tower gradients (None dropped) on the
variable device. Importing `stagegan` does not import TensorFlow; `stagegan.training` does.
"""

__version__ = "0.1.0"
