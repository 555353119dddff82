"""Shard files: found and sampled (``discovery``), read without torch (``stored``), loaded
safely (``reading``) into a ``Shard`` read once, per-format layouts, written, inspected,
and the streamed per-token norms (``stats``)."""
