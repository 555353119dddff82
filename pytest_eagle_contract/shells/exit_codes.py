"""Exit codes of every command: 0 everything holds, 1 findings, 2 usage errors, 130 when
interrupted (Ctrl-C: what was reported is kept, as a shell's 128 + SIGINT)."""

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
