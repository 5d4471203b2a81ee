"""Repository-wide pytest configuration.

Kept at the root so that ``tests`` imports as a package from any working directory.
"""
