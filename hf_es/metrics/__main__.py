"""`python -m hf_es.metrics {register,unregister,status}`: manage `evaluate.load("pass_at_k")` by bare name."""

from __future__ import annotations

import argparse
import sys

from .registration import AVAILABLE_METRICS, modules_cache, register, registered, unregister


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hf_es.metrics",
        description="Register hf_es's metrics in evaluate's module cache so that evaluate.load('<name>') finds "
        "them by bare name (offline and online), or remove them again.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("action", choices=("register", "unregister", "status"))
    parser.add_argument("names", nargs="*", help=f"metrics (default: all of {', '.join(AVAILABLE_METRICS)})")
    args = parser.parse_args(argv)
    names = args.names or list(AVAILABLE_METRICS)
    unknown = sorted(set(names) - set(AVAILABLE_METRICS))
    if unknown:
        parser.error(f"unknown metric(s) {', '.join(unknown)}; choose from {', '.join(AVAILABLE_METRICS)}")
    if args.action == "register":
        for name, module in register(names).items():
            print(f"{name}: registered as {module}")
    elif args.action == "unregister":
        removed = unregister(names)
        print("\n".join(f"removed {path}" for path in removed) or "nothing to remove")
        print("(`import hf_es` registers them again unless HF_ES_REGISTER_METRICS=0)")
    else:
        for name in names:
            entries = registered(name)
            print(f"{name}: {'registered' if entries else 'not registered'} in {modules_cache()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
