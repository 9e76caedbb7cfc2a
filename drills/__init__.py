"""Firedrill: the harness that performs drills against a GPU platform and judges them."""

__version__ = "0.1.0"
