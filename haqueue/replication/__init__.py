"""The bridge to pysyncobj: the only package that imports it."""
