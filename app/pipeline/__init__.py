"""The pipeline: stages, the claim-run-record loop, and its maintenance. Knows the engine, not HTTP."""
