"""Bars -> arrays: features, targets, gaps, the split, normalisation, the array file, the
incremental preprocess of new bars."""
