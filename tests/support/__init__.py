"""What the tests share: fixtures, harnesses and helpers, imported as ``tests.support.<module>`` (never from a
conftest, never through ``sys.path``). ``paths.ROOT`` is the checkout."""
