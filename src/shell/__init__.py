"""The imperative shell: ports, adapters, the executor, workers, runtime and CLI."""
