# The folder is an `evaluate` metric module (load it by path, or with `hf_es.metrics.load("maj_at_k")`).
