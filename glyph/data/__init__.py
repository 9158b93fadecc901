"""Task rows: MBPP (official data, splits) and, later, the conventions set."""
