"""Shard files: found and sampled (``discovery``), read without torch (``mapped``: the
layouts in ``torch_zip`` and ``safetensors_file``, each tensor a ``stored.Stored`` that knows
its place in the file), loaded safely (``reading``) into a ``Shard`` read once, per-format
layouts, written, inspected, and the streamed per-token norms (``stats``)."""
