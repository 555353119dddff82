"""Layer truth: which canonical layers each engine (and trainer) feeds the draft for given
aux ids, per release; the draft config keys they read (``draft_config``), and fixes."""
