"""Load during chaos: locust, run headless in its own process, drives inference and the control plane while a
drill runs (docs/LOAD.md). Only ``locustfile.py`` imports locust, and only locust's process imports it."""
