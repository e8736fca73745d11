"""One module per study; each function returns a tidy DataFrame (see the notebooks)."""
