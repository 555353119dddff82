"""``eagle-contract audit``: every shard of a set read once, summarised per file, merged.

- :mod:`.summaries`: one file's summary (:class:`FileSummary`, what a worker returns and the
  cache keeps) and the mergeable set summaries (moments and fixed histograms);
- :mod:`.local`: the per-file work and the local backend (a pool of processes);
- :mod:`.ray_backend`: the same work as one Ray task per file;
- :mod:`.cache`: per-file summaries kept by file identity, outside the shard folders;
- :mod:`.report`: outliers, drift against a previous audit, the JSON and text reports.
"""
