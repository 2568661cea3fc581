"""Performance benchmarks (not part of the test run): `python -m bench`."""
