"""Local stand-ins for the clouds, shared by the tests and the local demo (loopback only).

`moto_faults`: moto's server with fault injection and capacity pools. `fake_gce`: a small fake of
the Compute Engine REST API (no emulator exists). Both import their dependencies lazily.
"""
