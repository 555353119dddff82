"""Writing contracts from data: ``infer`` drafts one from shards (and a target), ``observed``
predicts the bounds fresh shards will fall in, ``baseline`` re-measures a contract's bounds.
Above the checks and the self-test, which a drafted contract is run through."""
