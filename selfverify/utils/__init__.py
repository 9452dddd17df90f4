"""Small shared pieces: atomic I/O and record reading, seeds, metrics tracking, plots."""
