"""Value types shared by every layer. Pure data: no I/O."""
