"""What a live engine feeds the draft: capture files and their index, recording them, the
SGLang client and its bounded HTTP, the SGLang hooks, and the comparison with the contract."""
