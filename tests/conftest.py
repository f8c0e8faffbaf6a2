"""The slowest test file first. Under pytest-xdist (the README's `-n 2 --dist loadfile`) one
worker then starts the learning runs while the other takes every other file, instead of the
learning runs coming last and running alone."""

FIRST = "test_learning.py"


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: item.path.name != FIRST)  # a stable sort: the rest keep their order
