"""The check families, one module each (``family.py`` says what a family is): each reads a
unit (a contract, or one shard) and returns findings. The registry that lists them and the
planner that runs them are in ``plan/``."""
