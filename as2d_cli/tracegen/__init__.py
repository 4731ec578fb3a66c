"""`as2d traces build`: run the real models over the corpus and write as2d.trace files."""
