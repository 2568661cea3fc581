"""Greedy generation of the demo's 16-prompt training batch (10 new tokens) in bfloat16 and float32, interleaved 3
times in one process so that both see the same load; CPU time (time.process_time) and wall time per call.

    OMP_NUM_THREADS=1 python docs/demo/dtype_cost.py ~/.cache/hf_es/SmolLM2-135M-Instruct
"""

import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from hf_es.tasks import TaskArguments, load_task

path = sys.argv[1]
tok = AutoTokenizer.from_pretrained(path)
tok.padding_side = "left"
train, _ = load_task(TaskArguments(num_train_samples=16, num_eval_samples=4, arithmetic_held_out_fraction=0.5), seed=0)
texts = [tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in train["prompt"]]
batch = tok(texts, return_tensors="pt", padding=True)
models = {dt: AutoModelForCausalLM.from_pretrained(path, dtype=dt).eval() for dt in (torch.bfloat16, torch.float32)}
res = {dt: [] for dt in models}
with torch.no_grad():
    for _rep in range(3):
        for dt, m in models.items():
            c = time.process_time()
            w = time.time()
            m.generate(**batch, max_new_tokens=10, do_sample=False, pad_token_id=tok.pad_token_id)
            res[dt].append((time.process_time() - c, time.time() - w))
for dt, r in res.items():
    print(dt, "cpu_s", [round(a, 2) for a, _ in r], "wall_s", [round(b, 2) for _, b in r])
