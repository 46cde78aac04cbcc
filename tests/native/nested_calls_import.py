"""Imported over and over by nested_calls.py: module code that calls the hot function."""

from nested_calls import leaf

VALUES = [leaf(i) for i in range(20)]
