"""Exit codes of every command: 0 everything holds, 1 findings, 2 usage errors."""

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
