"""The two shells over one core: the ``eagle-contract`` CLI (``cli``, ``gate``, ``commands``,
``audit``) and the pytest plugin (``plugin``, ``options``, ``fixtures``, ``report_hooks``).
Nothing below imports a shell."""
