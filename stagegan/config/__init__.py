"""The TF-free surface: the config schema (one record per section), presets and stage files, memory
and cluster checks, and the objects a config names by `module:function`."""
