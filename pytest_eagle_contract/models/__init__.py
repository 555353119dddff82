"""Model code: the target (loaded, run, captured at canonical layers), the draft (config,
weights, the model that runs it), the acceptance estimator, tiny reference models, and the
guard that checks a shard's ids before a model runs on them."""
