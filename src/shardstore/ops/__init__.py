"""Whole-dataset operations on the public API and stores (integrity scanning, ...)."""
