"""Backends that store and move jobs. They hold no policy."""
