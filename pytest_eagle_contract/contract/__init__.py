"""The contract model: the YAML read safely (``safe_yaml``), validated against the schema and
turned into a ``Contract`` whose every key knows its line. Writing contracts is ``authoring/``."""
