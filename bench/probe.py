"""Cost of the start-up check that perturbations land (`hf_es.trainer.probe`) on SmolLM2-135M.

    OMP_WAIT_POLICY=PASSIVE python -m bench.probe --repeats 3

Builds the transformers backend and its centre as the trainer does (bf16, table or Gaussian noise), runs
`check_perturbations_land` `repeats` times and reports the forwards, the groups and the median seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch


def run(noise_type: str = "table", dtype: str = "bfloat16", repeats: int = 3) -> dict:
    """Times the check on the bundled model; returns the summary."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_es.es import make_noise_source
    from hf_es.generation import TransformersGenerationBackend
    from hf_es.models import prepare_smollm2
    from hf_es.trainer.probe import check_perturbations_land

    path = prepare_smollm2()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    backend = TransformersGenerationBackend(model, AutoTokenizer.from_pretrained(path))
    num_parameters = sum(p.numel() for p in model.parameters())
    backend.init_centre(make_noise_source(noise_type, table_size=None, num_parameters=num_parameters))
    probes = [check_perturbations_land(backend) for _ in range(repeats)]
    return {
        "model": "SmolLM2-135M-Instruct",
        "noise_type": noise_type,
        "dtype": dtype,
        "torch_threads": torch.get_num_threads(),
        "groups": {group: len(names) for group, names in probes[0].groups.items()},
        "forwards": probes[0].forwards,
        "seconds_median": statistics.median(p.seconds for p in probes),
        "seconds_all": [round(p.seconds, 3) for p in probes],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--noise_type", default="table")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(run(args.noise_type, args.dtype, args.repeats), indent=2))


if __name__ == "__main__":
    main()
