"""The pure planning core: no I/O, no clock reads."""
