"""The contract's self-test: records built from a contract, mutations of them (the pipeline
bugs), Hypothesis strategies for users' tests, the self-test that checks each is caught,
its kept verdicts, and the ``sharpness`` family that runs it."""
