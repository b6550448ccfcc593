"""The GPU programme: ``run.sh`` (run from the repository root), ``prepare.sh`` and the GPT throughput run."""
