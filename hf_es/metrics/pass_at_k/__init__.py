# The folder is an `evaluate` metric module (load it by path, or with `hf_es.metrics.load("pass_at_k")`).
