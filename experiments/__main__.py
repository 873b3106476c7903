"""``python -m experiments experiment=<name> [overrides]`` is the same as ``python -m experiments.run ...``."""
import runpy

if __name__ == "__main__":
    # run the module as __main__ so Hydra resolves conf/ relative to experiments/run.py, exactly as with -m
    runpy.run_module("experiments.run", run_name="__main__", alter_sys=True)
