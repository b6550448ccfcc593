"""seqbook's benchmark harness: the book's layers timed against PyTorch's built-ins and torch-hd, and
the chapters timed notebook by notebook. It lives beside the package, not in it; run it from the root
of the repository as ``python -m benchmarks`` (``python -m benchmarks --help`` lists the options)."""
