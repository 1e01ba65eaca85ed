"""The test suite: one package per part of KFS; its tiers are the pytest markers of pyproject.toml."""
