"""pytest-eagle-contract: contracts between EAGLE-3 training shards and the serving engine."""
