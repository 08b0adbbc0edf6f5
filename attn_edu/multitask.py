"""Moved to :mod:`attn_edu.experiments.multitask`; this name keeps old imports and ``python -m attn_edu.multitask`` working."""

import sys

from attn_edu.experiments import multitask as _experiment

if __name__ == "__main__":
    sys.exit(_experiment.main())
sys.modules[__name__] = _experiment
