"""Reports people look at: the versioned JSON report, GitHub Actions annotations and step
summary, JUnit properties and a self-contained HTML report with plots.

Every shell builds a :class:`~.run.CheckRun` per contract and hands it to :func:`publish`;
importing this package loads nothing heavy (matplotlib only when a plot is drawn).
"""
